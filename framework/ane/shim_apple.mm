// AppleShim: the Shim (shim.h) over AppleNeuralEngine.framework's private classes. Built only on
// Apple hosts (framework/CMakeLists.txt `if(APPLE)`), compiled with manual reference counting
// (-fno-objc-arc) so that it is also syntax-checked on Linux with gobjc++ + GNUstep
// (tests/ane/shim_syntax_check.sh). Facts from ../shared/reference/ane_digest.md §1.
//
// No logic lives here: one method per private call, every BOOL / NSError / nil / kern_return_t and
// every Objective-C exception turned into a Status naming the selector (shim_error). The framework is
// dlopen()ed; classes are resolved with NSClassFromString; the private selectors are declared in
// protocols below with their exact argument and return types, so each call is type-checked at
// compile time (instead of casting the raw message-send function to each signature).
#import <Foundation/Foundation.h>
#include <IOSurface/IOSurface.h>
#include <dlfcn.h>

#include <map>

#include "framework/ane/shim.h"

// ---- private API declarations (digest §1.2, §1.5, §1.6) -----------------------------------------
@protocol ANEShimDescriptorClass
- (id)modelWithMILText:(NSData*)milText weights:(NSDictionary*)weights optionsPlist:(id)options;
@end
@protocol ANEShimModelClass
- (id)inMemoryModelWithDescriptor:(id)descriptor;
@end
@protocol ANEShimModel
- (NSString*)hexStringIdentifier;
- (BOOL)compileWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;
- (BOOL)compiledModelExists;
- (BOOL)loadWithQoS:(unsigned int)qos options:(NSDictionary*)options error:(NSError**)error;
- (BOOL)evaluateWithQoS:(unsigned int)qos options:(NSDictionary*)options request:(id)request error:(NSError**)error;
- (BOOL)unloadWithQoS:(unsigned int)qos error:(NSError**)error;
- (id)model;
@end
@protocol ANEShimCompiledModel
- (NSDictionary*)modelAttributes;
@end
@protocol ANEShimSurfaceObjectClass
- (id)objectWithIOSurface:(IOSurfaceRef)surface;
@end
@protocol ANEShimRequestClass
- (id)requestWithInputs:(NSArray*)inputs
           inputIndices:(NSArray*)inputIndices
                outputs:(NSArray*)outputs
          outputIndices:(NSArray*)outputIndices
          weightsBuffer:(id)weightsBuffer
              perfStats:(id)perfStats
         procedureIndex:(NSNumber*)procedureIndex;
@end
@protocol ANEShimDeviceInfoClass
- (id)aneSubType;
@end
@protocol ANEShimClientClass
- (id)sharedConnection;
@end
@protocol ANEShimClient <NSObject>
- (BOOL)doEvaluateDirectWithModel:(id)model
                          options:(NSDictionary*)options
                          request:(id)request
                              qos:(unsigned int)qos
                            error:(NSError**)error;
@end

namespace anelab::ane {
namespace {

const char* kFrameworkPath = "/System/Library/PrivateFrameworks/AppleNeuralEngine.framework/AppleNeuralEngine";

std::string utf8(NSString* s) {
  const char* c = s ? [s UTF8String] : nullptr;
  return c ? std::string(c) : std::string();
}

NSString* ns(const std::string& s) { return [NSString stringWithUTF8String:s.c_str()]; }

// A BOOL NO / nil result: the NSError's text, or say that there was none.
Status from_nserror(const char* selector, NSError* e, const char* what_failed) {
  if (!e) return shim_error(selector, std::string(what_failed) + " without an NSError", "none", 0);
  return shim_error(selector, utf8([e localizedDescription]), utf8([e domain]), static_cast<long>([e code]));
}

Status from_exception(const char* selector, NSException* ex) {
  return shim_error(selector, "Objective-C exception: " + utf8([ex reason]), utf8([ex name]), 0);
}

// Drains the autorelease pool of one shim call (manual reference counting).
class Pool {
 public:
  Pool() : pool_([[NSAutoreleasePool alloc] init]) {}
  ~Pool() { [pool_ drain]; }
  Pool(const Pool&) = delete;
  Pool& operator=(const Pool&) = delete;

 private:
  NSAutoreleasePool* pool_;
};

class AppleShim : public Shim {
 public:
  // Loads the framework and resolves the classes; ok() false with the reason otherwise.
  AppleShim() {
    Pool pool;
    handle_ = dlopen(kFrameworkPath, RTLD_NOW);
    if (!handle_) {
      const char* e = dlerror();
      why_ = cat("cannot load AppleNeuralEngine.framework (", e ? e : "dlopen failed",
                 "); the native backend needs "
                 "macOS on Apple Silicon — use --backend emulator");
      return;
    }
    descriptor_ = NSClassFromString(@"_ANEInMemoryModelDescriptor");
    model_ = NSClassFromString(@"_ANEInMemoryModel");
    request_ = NSClassFromString(@"_ANERequest");
    surface_object_ = NSClassFromString(@"_ANEIOSurfaceObject");
    device_info_ = NSClassFromString(@"_ANEDeviceInfo");  // optional
    client_ = NSClassFromString(@"_ANEClient");           // optional: evaluate_direct only
    if (!descriptor_ || !model_ || !request_ || !surface_object_)
      why_ = "AppleNeuralEngine.framework loaded, but its private classes (_ANEInMemoryModelDescriptor, "
             "_ANEInMemoryModel, _ANERequest, _ANEIOSurfaceObject) are missing on this macOS version";
  }
  ~AppleShim() override {
    for (auto& [id, r] : requests_) [r release];
    for (auto& [id, s] : surfaces_) release(s);
    for (auto& [id, m] : models_) release(m);
    // The framework stays loaded: classes may still be referenced by the daemon connection.
  }
  bool ok() const { return why_.empty(); }
  const std::string& why() const { return why_; }

  std::string describe() const override { return cat("AppleNeuralEngine.framework (dlopen ", kFrameworkPath, ")"); }

  Result<std::string> ane_sub_type() override {
    Pool pool;
    if (!device_info_) return shim_error(sel::kSubType, "class _ANEDeviceInfo not found", "none", 0);
    @try {
      id v = [(id<ANEShimDeviceInfoClass>)device_info_ aneSubType];
      if (!v) return shim_error(sel::kSubType, "returned nil", "none", 0);
      return utf8([v description]);
    } @catch (NSException* ex) {
      return from_exception(sel::kSubType, ex);
    }
  }

  std::string temporary_directory() override {
    Pool pool;
    return utf8(NSTemporaryDirectory());
  }

  Result<ModelHandle> create_model(std::string_view mil_text, std::span<const WeightEntry> weights) override {
    Pool pool;
    @try {
      NSData* text = [NSData dataWithBytes:mil_text.data() length:mil_text.size()];
      NSMutableDictionary* dict = [NSMutableDictionary dictionary];  // @{} when empty, never nil (§1.2)
      for (const WeightEntry& w : weights) {
        NSData* data = [NSData dataWithBytes:w.data.data() length:w.data.size()];
        NSDictionary* entry = [NSDictionary
            dictionaryWithObjectsAndKeys:[NSNumber numberWithUnsignedLongLong:w.offset], @"offset", data, @"data", nil];
        [dict setObject:entry forKey:ns(w.path)];
      }
      id desc = [(id<ANEShimDescriptorClass>)descriptor_ modelWithMILText:text weights:dict optionsPlist:nil];
      if (!desc) return shim_error(sel::kDescriptor, "returned nil", "none", 0);
      id model = [(id<ANEShimModelClass>)model_ inMemoryModelWithDescriptor:desc];
      if (!model) return shim_error(sel::kModel, "returned nil", "none", 0);
      const uint64_t id_ = next_id_++;
      models_[id_] = ModelEntry{[desc retain], [model retain]};
      return ModelHandle{id_};
    } @catch (NSException* ex) {
      return from_exception(sel::kDescriptor, ex);
    }
  }

  Result<std::string> hex_string_identifier(ModelHandle m) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kHexId, "unknown model handle", "none", 0);
    @try {
      NSString* hex = [model hexStringIdentifier];
      if (!hex) return shim_error(sel::kHexId, "returned nil", "none", 0);
      return utf8(hex);
    } @catch (NSException* ex) {
      return from_exception(sel::kHexId, ex);
    }
  }

  Status compile(ModelHandle m, uint32_t qos) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kCompile, "unknown model handle", "none", 0);
    @try {
      NSError* e = nil;
      if (![model compileWithQoS:qos options:[NSDictionary dictionary] error:&e])
        return from_nserror(sel::kCompile, e, "returned NO");
      return Status::ok();
    } @catch (NSException* ex) {
      return from_exception(sel::kCompile, ex);
    }
  }

  Result<bool> compiled_model_exists(ModelHandle m) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kCompiledExists, "unknown model handle", "none", 0);
    if (![(id)model respondsToSelector:@selector(compiledModelExists)])  // older macOS: no reuse, compile
      return shim_error(sel::kCompiledExists, "selector not implemented on this macOS version", "none", 0);
    @try {
      return static_cast<bool>([model compiledModelExists]);
    } @catch (NSException* ex) {
      return from_exception(sel::kCompiledExists, ex);
    }
  }

  Status load(ModelHandle m, uint32_t qos) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kLoad, "unknown model handle", "none", 0);
    @try {
      NSError* e = nil;
      if (![model loadWithQoS:qos options:[NSDictionary dictionary] error:&e])
        return from_nserror(sel::kLoad, e, "returned NO");
      return Status::ok();
    } @catch (NSException* ex) {
      return from_exception(sel::kLoad, ex);
    }
  }

  Status evaluate(ModelHandle m, RequestHandle r, uint32_t qos) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    auto it = requests_.find(r.id);
    if (!model || it == requests_.end())
      return shim_error(sel::kEvaluate, "unknown model or request handle", "none", 0);
    @try {
      NSError* e = nil;
      if (![model evaluateWithQoS:qos options:[NSDictionary dictionary] request:it->second error:&e])
        return from_nserror(sel::kEvaluate, e, "returned NO");
      return Status::ok();
    } @catch (NSException* ex) {
      return from_exception(sel::kEvaluate, ex);
    }
  }

  // digest §1.8: the shared client's direct evaluation, with the _ANEInMemoryModel and the same request.
  Status evaluate_direct(ModelHandle m, RequestHandle r, uint32_t qos) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    auto it = requests_.find(r.id);
    if (!model || it == requests_.end())
      return shim_error(sel::kEvaluateDirect, "unknown model or request handle", "none", 0);
    if (!client_) return shim_error(sel::kClient, "class _ANEClient not found", "none", 0);
    @try {
      id<ANEShimClient> client = [(id<ANEShimClientClass>)client_ sharedConnection];
      if (!client) return shim_error(sel::kClient, "returned nil", "none", 0);
      if (![client respondsToSelector:@selector(doEvaluateDirectWithModel:options:request:qos:error:)])
        return shim_error(sel::kEvaluateDirect, "_ANEClient does not respond to it on this macOS version", "none", 0);
      NSError* e = nil;
      if (![client doEvaluateDirectWithModel:model
                                     options:[NSDictionary dictionary]
                                     request:it->second
                                         qos:qos
                                       error:&e])
        return from_nserror(sel::kEvaluateDirect, e, "returned NO");
      return Status::ok();
    } @catch (NSException* ex) {
      return from_exception(sel::kEvaluateDirect, ex);
    }
  }

  Status unload(ModelHandle m, uint32_t qos) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kUnload, "unknown model handle", "none", 0);
    @try {  // may throw on forged models (digest §1.4)
      NSError* e = nil;
      if (![model unloadWithQoS:qos error:&e]) return from_nserror(sel::kUnload, e, "returned NO");
      return Status::ok();
    } @catch (NSException* ex) {
      return from_exception(sel::kUnload, ex);
    }
  }

  // [[model model] modelAttributes][@"ANEFModelDescription"][@"ANEFModelProcedures"] (digest §1.9,
  // as ane-infer's ane_runtime.m reads it): an array of {ProcedureID, InputSymbolIndexArray,
  // OutputSymbolIndexArray}.
  Result<std::vector<ProcedureSymbols>> procedure_symbols(ModelHandle m) override {
    Pool pool;
    id<ANEShimModel> model = find(m);
    if (!model) return shim_error(sel::kProcedures, "unknown model handle", "none", 0);
    @try {
      id compiled = [model model];
      if (!compiled || ![compiled respondsToSelector:@selector(modelAttributes)])
        return shim_error(sel::kProcedures, "the loaded model has no _ANEModel with modelAttributes", "none", 0);
      NSDictionary* attrs = [(id<ANEShimCompiledModel>)compiled modelAttributes];
      id desc = [attrs isKindOfClass:[NSDictionary class]] ? [attrs objectForKey:@"ANEFModelDescription"] : nil;
      id procs = [desc isKindOfClass:[NSDictionary class]] ? [desc objectForKey:@"ANEFModelProcedures"] : nil;
      if (![procs isKindOfClass:[NSArray class]])
        return shim_error(sel::kProcedures, "no ANEFModelProcedures array in the model attributes", "none", 0);
      auto numbers = [](id arr, std::vector<int64_t>& out) {
        if (![arr isKindOfClass:[NSArray class]]) return false;
        NSArray* a = (NSArray*)arr;
        for (NSUInteger k = 0; k < [a count]; ++k) {
          id n = [a objectAtIndex:k];
          if (![n isKindOfClass:[NSNumber class]]) return false;
          out.push_back([(NSNumber*)n longLongValue]);
        }
        return true;
      };
      std::vector<ProcedureSymbols> v;
      NSArray* list = (NSArray*)procs;
      for (NSUInteger k = 0; k < [list count]; ++k) {
        id p = [list objectAtIndex:k];
        ProcedureSymbols ps;
        id pid = [p isKindOfClass:[NSDictionary class]] ? [p objectForKey:@"ProcedureID"] : nil;
        if (![pid isKindOfClass:[NSNumber class]] || !numbers([p objectForKey:@"InputSymbolIndexArray"], ps.inputs) ||
            !numbers([p objectForKey:@"OutputSymbolIndexArray"], ps.outputs))
          return shim_error(sel::kProcedures,
                            "an ANEFModelProcedures entry lacks ProcedureID / InputSymbolIndexArray / "
                            "OutputSymbolIndexArray numbers",
                            "none", 0);
        ps.procedure_id = [(NSNumber*)pid longLongValue];
        v.push_back(std::move(ps));
      }
      return v;
    } @catch (NSException* ex) {
      return from_exception(sel::kProcedures, ex);
    }
  }

  void release_model(ModelHandle m) override {
    auto it = models_.find(m.id);
    if (it == models_.end()) return;
    release(it->second);
    models_.erase(it);
  }

  Result<SurfaceHandle> create_surface(size_t bytes) override {
    Pool pool;
    NSNumber* n = [NSNumber numberWithUnsignedLong:bytes];
    NSNumber* one = [NSNumber numberWithInt:1];
    NSNumber* zero = [NSNumber numberWithInt:0];
    NSDictionary* props =
        [NSDictionary dictionaryWithObjectsAndKeys:  // a 1-D byte buffer (digest §1.5)
                          n, (id)kIOSurfaceWidth, one, (id)kIOSurfaceHeight, one, (id)kIOSurfaceBytesPerElement, n,
                          (id)kIOSurfaceBytesPerRow, n, (id)kIOSurfaceAllocSize, zero, (id)kIOSurfacePixelFormat, nil];
    IOSurfaceRef ref = IOSurfaceCreate((CFDictionaryRef)props);
    if (!ref) return shim_error(sel::kSurfaceCreate, cat("returned NULL for ", bytes, " bytes"), "none", 0);
    @try {
      id obj = [(id<ANEShimSurfaceObjectClass>)surface_object_ objectWithIOSurface:ref];
      if (!obj) {
        CFRelease(ref);
        return shim_error(sel::kSurfaceObject, "returned nil", "none", 0);
      }
      const uint64_t id_ = next_id_++;
      surfaces_[id_] = SurfaceEntry{ref, [obj retain]};
      return SurfaceHandle{id_};
    } @catch (NSException* ex) {
      CFRelease(ref);
      return from_exception(sel::kSurfaceObject, ex);
    }
  }

  Result<SurfaceMapping> lock_surface(SurfaceHandle s, bool read_only) override {
    auto it = surfaces_.find(s.id);
    if (it == surfaces_.end()) return shim_error(sel::kSurfaceLock, "unknown surface handle", "none", 0);
    kern_return_t kr = IOSurfaceLock(it->second.ref, read_only ? kIOSurfaceLockReadOnly : 0, NULL);
    if (kr != 0) return shim_error(sel::kSurfaceLock, "failed", "kern_return_t", static_cast<long>(kr));
    return SurfaceMapping{IOSurfaceGetBaseAddress(it->second.ref), IOSurfaceGetAllocSize(it->second.ref)};
  }

  Status unlock_surface(SurfaceHandle s, bool read_only) override {
    auto it = surfaces_.find(s.id);
    if (it == surfaces_.end()) return shim_error(sel::kSurfaceUnlock, "unknown surface handle", "none", 0);
    kern_return_t kr = IOSurfaceUnlock(it->second.ref, read_only ? kIOSurfaceLockReadOnly : 0, NULL);
    if (kr != 0) return shim_error(sel::kSurfaceUnlock, "failed", "kern_return_t", static_cast<long>(kr));
    return Status::ok();
  }

  void release_surface(SurfaceHandle s) override {
    auto it = surfaces_.find(s.id);
    if (it == surfaces_.end()) return;
    release(it->second);
    surfaces_.erase(it);
  }

  Result<RequestHandle> create_request(const RequestSpec& spec) override {
    Pool pool;
    NSMutableArray* ins = [NSMutableArray array];
    NSMutableArray* outs = [NSMutableArray array];
    NSMutableArray* in_idx = [NSMutableArray array];
    NSMutableArray* out_idx = [NSMutableArray array];
    for (SurfaceHandle h : spec.inputs) {
      auto it = surfaces_.find(h.id);
      if (it == surfaces_.end()) return shim_error(sel::kRequest, "unknown input surface handle", "none", 0);
      [ins addObject:it->second.object];
    }
    for (SurfaceHandle h : spec.outputs) {
      auto it = surfaces_.find(h.id);
      if (it == surfaces_.end()) return shim_error(sel::kRequest, "unknown output surface handle", "none", 0);
      [outs addObject:it->second.object];
    }
    for (int64_t i : spec.input_indices) [in_idx addObject:[NSNumber numberWithLongLong:i]];
    for (int64_t i : spec.output_indices) [out_idx addObject:[NSNumber numberWithLongLong:i]];
    @try {
      id req = [(id<ANEShimRequestClass>)request_ requestWithInputs:ins
                                                       inputIndices:in_idx
                                                            outputs:outs
                                                      outputIndices:out_idx
                                                      weightsBuffer:nil
                                                          perfStats:nil
                                                     procedureIndex:[NSNumber numberWithLongLong:spec.procedure_index]];
      if (!req) return shim_error(sel::kRequest, "returned nil", "none", 0);
      const uint64_t id_ = next_id_++;
      requests_[id_] = [req retain];
      return RequestHandle{id_};
    } @catch (NSException* ex) {
      return from_exception(sel::kRequest, ex);
    }
  }

  void release_request(RequestHandle r) override {
    auto it = requests_.find(r.id);
    if (it == requests_.end()) return;
    [it->second release];
    requests_.erase(it);
  }

 private:
  struct ModelEntry {
    id descriptor;  // retained
    id model;       // retained _ANEInMemoryModel
  };
  struct SurfaceEntry {
    IOSurfaceRef ref;  // owned (CFRelease)
    id object;         // retained _ANEIOSurfaceObject
  };
  static void release(ModelEntry& m) {
    [m.model release];
    [m.descriptor release];
  }
  static void release(SurfaceEntry& s) {
    [s.object release];
    CFRelease(s.ref);
  }
  id<ANEShimModel> find(ModelHandle m) {
    auto it = models_.find(m.id);
    return it == models_.end() ? nil : (id<ANEShimModel>)it->second.model;
  }

  void* handle_ = nullptr;
  std::string why_;
  Class descriptor_ = nil, model_ = nil, request_ = nil, surface_object_ = nil, device_info_ = nil, client_ = nil;
  std::map<uint64_t, ModelEntry> models_;
  std::map<uint64_t, SurfaceEntry> surfaces_;
  std::map<uint64_t, id> requests_;  // retained _ANERequest
  uint64_t next_id_ = 1;
};

}  // namespace

std::unique_ptr<Shim> create_system_shim(std::string* why_not) {
  auto shim = std::make_unique<AppleShim>();
  if (!shim->ok()) {
    if (why_not) *why_not = shim->why();
    return nullptr;
  }
  return shim;
}

}  // namespace anelab::ane
