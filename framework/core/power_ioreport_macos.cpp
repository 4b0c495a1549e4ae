// IOReport "Energy Model" counters (macOS on Apple silicon, no root needed): the channels that tools
// such as macmon read. libIOReport.dylib and CoreFoundation are loaded with dlopen/dlsym, so nothing
// here needs the macOS SDK's framework headers or link flags; the CoreFoundation types are declared
// as the opaque pointers they are.
//
// Channel names -> rails (names as macmon documents them; one channel per block, sub-channels such as
// `ANE0_SRAM`, per-core or per-cluster channels are not summed):
//   cpu:  names ending in "CPU Energy" ("CPU Energy"; "DIE_<n>_CPU Energy" on an Ultra)
//   gpu:  "GPU Energy"
//   ane:  "ANE", "ANE<n>", "ANE<n>_<m>"
//   dram: "DRAM", "DRAM<n>", "DRAM<n>_<m>"
// Each channel is an integer count in the unit its IOReportChannelGetUnitLabel names (mJ, uJ, nJ).
// A reading is IOReportCreateSamplesDelta(first sample, current sample): energy since open.
//
// This file is compiled only on macOS (the body is #if __APPLE__); it cannot be run on Linux, and
// what it returns on a Mac is verified there only (docs/dashboard.md says how).
#include <string>

#include "framework/core/clock.h"
#include "framework/core/power.h"

#if defined(__APPLE__)
#include <dlfcn.h>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>
#include <vector>

#include "framework/core/error.h"

namespace anelab::power {
namespace {

// Opaque CoreFoundation / IOReport types (all are pointers to CF objects).
using CFTypeRef = const void*;
using CFStringRef = const struct OpaqueCFString*;
using CFDictionaryRef = const struct OpaqueCFDictionary*;
using CFMutableDictionaryRef = struct OpaqueCFDictionary*;
using CFArrayRef = const struct OpaqueCFArray*;
using CFAllocatorRef = const void*;
using CFIndex = long;
using IOReportSubscriptionRef = struct OpaqueIOReportSubscription*;
constexpr uint32_t kCFStringEncodingUTF8 = 0x08000100;

struct Api {
  void *cf = nullptr, *ior = nullptr;
  // CoreFoundation
  CFStringRef (*CFStringCreateWithCString)(CFAllocatorRef, const char*, uint32_t) = nullptr;
  bool (*CFStringGetCString)(CFStringRef, char*, CFIndex, uint32_t) = nullptr;
  void (*CFRelease)(CFTypeRef) = nullptr;
  CFTypeRef (*CFDictionaryGetValue)(CFDictionaryRef, const void*) = nullptr;
  CFIndex (*CFDictionaryGetCount)(CFDictionaryRef) = nullptr;
  CFMutableDictionaryRef (*CFDictionaryCreateMutableCopy)(CFAllocatorRef, CFIndex, CFDictionaryRef) = nullptr;
  CFIndex (*CFArrayGetCount)(CFArrayRef) = nullptr;
  CFTypeRef (*CFArrayGetValueAtIndex)(CFArrayRef, CFIndex) = nullptr;
  // IOReport (private; signatures as used by macmon and others)
  CFDictionaryRef (*IOReportCopyChannelsInGroup)(CFStringRef, CFStringRef, uint64_t, uint64_t, uint64_t) = nullptr;
  IOReportSubscriptionRef (*IOReportCreateSubscription)(const void*, CFMutableDictionaryRef, CFMutableDictionaryRef*,
                                                        uint64_t, CFTypeRef) = nullptr;
  CFDictionaryRef (*IOReportCreateSamples)(IOReportSubscriptionRef, CFMutableDictionaryRef, CFTypeRef) = nullptr;
  CFDictionaryRef (*IOReportCreateSamplesDelta)(CFDictionaryRef, CFDictionaryRef, CFTypeRef) = nullptr;
  CFStringRef (*IOReportChannelGetGroup)(CFDictionaryRef) = nullptr;
  CFStringRef (*IOReportChannelGetChannelName)(CFDictionaryRef) = nullptr;
  CFStringRef (*IOReportChannelGetUnitLabel)(CFDictionaryRef) = nullptr;
  int64_t (*IOReportSimpleGetIntegerValue)(CFDictionaryRef, int32_t) = nullptr;

  // Empty string when everything resolved, else what is missing.
  std::string load() {
    cf = ::dlopen("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation", RTLD_LAZY | RTLD_LOCAL);
    if (!cf) return std::string("cannot load CoreFoundation: ") + ::dlerror();
    ior = ::dlopen("/usr/lib/libIOReport.dylib", RTLD_LAZY | RTLD_LOCAL);
    if (!ior) return std::string("cannot load /usr/lib/libIOReport.dylib: ") + ::dlerror();
    std::string missing;
    auto sym = [&](void* lib, const char* name, auto& fn) {
      void* p = ::dlsym(lib, name);
      if (!p) missing += std::string(missing.empty() ? "" : ", ") + name;
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(p);
    };
    sym(cf, "CFStringCreateWithCString", CFStringCreateWithCString);
    sym(cf, "CFStringGetCString", CFStringGetCString);
    sym(cf, "CFRelease", CFRelease);
    sym(cf, "CFDictionaryGetValue", CFDictionaryGetValue);
    sym(cf, "CFDictionaryGetCount", CFDictionaryGetCount);
    sym(cf, "CFDictionaryCreateMutableCopy", CFDictionaryCreateMutableCopy);
    sym(cf, "CFArrayGetCount", CFArrayGetCount);
    sym(cf, "CFArrayGetValueAtIndex", CFArrayGetValueAtIndex);
    sym(ior, "IOReportCopyChannelsInGroup", IOReportCopyChannelsInGroup);
    sym(ior, "IOReportCreateSubscription", IOReportCreateSubscription);
    sym(ior, "IOReportCreateSamples", IOReportCreateSamples);
    sym(ior, "IOReportCreateSamplesDelta", IOReportCreateSamplesDelta);
    sym(ior, "IOReportChannelGetGroup", IOReportChannelGetGroup);
    sym(ior, "IOReportChannelGetChannelName", IOReportChannelGetChannelName);
    sym(ior, "IOReportChannelGetUnitLabel", IOReportChannelGetUnitLabel);
    sym(ior, "IOReportSimpleGetIntegerValue", IOReportSimpleGetIntegerValue);
    return missing.empty() ? "" : "missing symbols: " + missing;
  }

  std::string str(CFStringRef s) const {
    if (!s) return "";
    char buf[256] = {};
    return CFStringGetCString(s, buf, sizeof buf, kCFStringEncodingUTF8) ? std::string(buf) : std::string();
  }
};

// "ANE", "ANE3", "ANE0_1" for prefix "ANE" (prefix, then optional digits, then optional _digits): a
// block's own channel, not a sub-channel such as "ANE0_SRAM".
bool block_name(const std::string& n, const char* prefix) {
  const size_t k = std::strlen(prefix);
  if (n.compare(0, k, prefix) != 0) return false;
  size_t i = k;
  auto digits = [&] {
    const size_t start = i;
    while (i < n.size() && n[i] >= '0' && n[i] <= '9') ++i;
    return i > start;
  };
  if (i == n.size()) return true;
  if (!digits()) return false;
  if (i == n.size()) return true;
  if (n[i++] != '_') return false;
  return digits() && i == n.size();
}

bool channel_rail(const std::string& n, Rail* r) {
  if (n == "GPU Energy")
    *r = Rail::gpu;
  else if (n.size() >= 10 && n.compare(n.size() - 10, 10, "CPU Energy") == 0)
    *r = Rail::cpu;
  else if (block_name(n, "ANE"))
    *r = Rail::ane;
  else if (block_name(n, "DRAM"))
    *r = Rail::dram;
  else
    return false;
  return true;
}

double unit_joules(const std::string& u) {
  if (u == "mJ") return 1e-3;
  if (u == "uJ" || u == "\xC2\xB5J") return 1e-6;
  if (u == "nJ") return 1e-9;
  return 0;
}

class IOReportSource final : public Source {
 public:
  IOReportSource(Api api, IOReportSubscriptionRef sub, CFMutableDictionaryRef chans)
      : api_(api), sub_(sub), chans_(chans), t0_(steady_seconds()) {
    first_ = api_.IOReportCreateSamples(sub_, chans_, nullptr);
    Reading r;
    next(&r);  // fixes the rails
  }
  ~IOReportSource() override {
    if (first_) api_.CFRelease(first_);
    if (chans_) api_.CFRelease(chans_);
  }
  std::string name() const override { return "ioreport"; }
  std::string detail() const override { return "IOReport \"Energy Model\" channels (libIOReport, no root)"; }
  std::string basis() const override { return "energy counters (IOReport)"; }
  bool self_paced() const override { return false; }
  std::vector<Rail> rails() const override { return rails_; }

  bool next(Reading* out) override {
    CFDictionaryRef cur = api_.IOReportCreateSamples(sub_, chans_, nullptr);
    if (!first_ || !cur) fail("power", "IOReportCreateSamples failed");
    CFDictionaryRef delta = api_.IOReportCreateSamplesDelta(first_, cur, nullptr);
    api_.CFRelease(cur);
    if (!delta) fail("power", "IOReportCreateSamplesDelta failed");
    Reading r;
    r.seconds = steady_seconds() - t0_;
    CFStringRef key = api_.CFStringCreateWithCString(nullptr, "IOReportChannels", kCFStringEncodingUTF8);
    auto items = static_cast<CFArrayRef>(api_.CFDictionaryGetValue(delta, key));
    api_.CFRelease(key);
    const CFIndex n = items ? api_.CFArrayGetCount(items) : 0;
    for (CFIndex i = 0; i < n; ++i) {
      auto ch = static_cast<CFDictionaryRef>(api_.CFArrayGetValueAtIndex(items, i));
      Rail rail;
      if (api_.str(api_.IOReportChannelGetGroup(ch)) != "Energy Model" ||
          !channel_rail(api_.str(api_.IOReportChannelGetChannelName(ch)), &rail))
        continue;
      const double scale = unit_joules(api_.str(api_.IOReportChannelGetUnitLabel(ch)));
      if (scale == 0) continue;
      const double j = static_cast<double>(api_.IOReportSimpleGetIntegerValue(ch, 0)) * scale;
      r.joules[rail] = (r.joules.has(rail) ? r.joules[rail] : 0.0) + j;
    }
    api_.CFRelease(delta);
    if (rails_.empty())
      for (Rail x : kAllRails)
        if (r.joules.has(x)) rails_.push_back(x);
    for (Rail x : rails_)
      if (!r.joules.has(x)) r.joules[x] = 0;  // a channel that reported nothing this time
    *out = r;
    return true;
  }

 private:
  Api api_;
  IOReportSubscriptionRef sub_ = nullptr;
  CFMutableDictionaryRef chans_ = nullptr;
  CFDictionaryRef first_ = nullptr;
  double t0_ = 0;
  std::vector<Rail> rails_;
};
}  // namespace

Opened open_ioreport() {
  Opened o;
  Api api;
  if (std::string e = api.load(); !e.empty()) {
    o.reason = "ioreport: " + e;
    return o;
  }
  CFStringRef group = api.CFStringCreateWithCString(nullptr, "Energy Model", kCFStringEncodingUTF8);
  CFDictionaryRef chan = api.IOReportCopyChannelsInGroup(group, nullptr, 0, 0, 0);
  api.CFRelease(group);
  if (!chan) {
    o.reason = "ioreport: no \"Energy Model\" channel group (not Apple silicon?)";
    return o;
  }
  CFMutableDictionaryRef chans = api.CFDictionaryCreateMutableCopy(nullptr, api.CFDictionaryGetCount(chan), chan);
  api.CFRelease(chan);
  CFMutableDictionaryRef subbed = nullptr;
  IOReportSubscriptionRef sub = api.IOReportCreateSubscription(nullptr, chans, &subbed, 0, nullptr);
  if (!sub) {
    api.CFRelease(chans);
    o.reason = "ioreport: IOReportCreateSubscription failed";
    return o;
  }
  auto src = std::make_unique<IOReportSource>(api, sub, chans);
  if (src->rails().empty()) {
    o.reason = "ioreport: no CPU/GPU/ANE/DRAM energy channels in the \"Energy Model\" group";
    return o;
  }
  o.source = std::move(src);
  return o;
}

}  // namespace anelab::power

#else  // not macOS

namespace anelab::power {
Opened open_ioreport() { return {nullptr, "ioreport: macOS only"}; }
}  // namespace anelab::power

#endif
