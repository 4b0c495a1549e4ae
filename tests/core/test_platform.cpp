// The platform layer (framework/core/platform.h): saved argv, executable path (direct and from argv[0] via a
// relative path, a symlink and $PATH), RSS that grows with a touched allocation, load average, CPU ticks,
// machine memory, and the procfs parsers against fake trees, malformed files included (a clear reason each).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>

#include "framework/core/platform.h"
#include "tests/common/test_data.h"

namespace anelab::platform {
namespace {
namespace fs = std::filesystem;

using test::put;

bool contains(const std::string& s, const std::string& sub) { return s.find(sub) != std::string::npos; }

// The executable ctest runs (ANELAB_TEST_BINARY, tests/CMakeLists.txt: test_core or a SIMD variant's twin).
std::string this_binary() {
  const char* name = std::getenv("ANELAB_TEST_BINARY");
  return fs::canonical(fs::path(ANELAB_BINARY_DIR) / "bin" / (name && *name ? name : "test_core")).string();
}

// Restores argv / cwd / $PATH saved by an earlier save_argv call and the process's $PATH.
class SavedState : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* p = std::getenv("PATH");
    path_ = p ? p : "";
    cwd_ = fs::current_path();
  }
  void TearDown() override {
    ::setenv("PATH", path_.c_str(), 1);
    fs::current_path(cwd_);
    save_with({"test_core"});
  }
  static void save_with(std::vector<std::string> args) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    save_argv(int(argv.size()), argv.data());
  }
  std::string path_;
  fs::path cwd_;
};

TEST_F(SavedState, SavedArgvRoundTrips) {
  save_with({"prog", "a b", "", "--x=ü"});
  EXPECT_EQ(saved_argv(), (std::vector<std::string>{"prog", "a b", "", "--x=ü"}));
  EXPECT_EQ(saved_cwd(), fs::current_path().string());
}

TEST(Platform, ExecutablePathIsThisBinary) {
  const auto p = executable_path();
  ASSERT_TRUE(p) << p.reason;
  EXPECT_EQ(*p, this_binary());
}

TEST_F(SavedState, ExecutableFromArgv0ViaRelativePathSymlinkAndPath) {
  const auto dir = test::temp_dir("platform_exe");
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "cwd");
  fs::create_symlink(this_binary(), dir / "bin" / "linked");
  fs::current_path(dir / "cwd");
  save_with({"../bin/linked", "--flag"});  // relative, through a symlink
  fs::current_path("/");                   // a later chdir must not matter
  auto e = executable_from_argv0();
  ASSERT_TRUE(e) << e.reason;
  EXPECT_EQ(*e, this_binary());
  ::setenv("PATH", ("/nonexistent::" + (dir / "bin").string()).c_str(), 1);
  save_with({"linked"});  // through $PATH (an empty entry and a missing directory first)
  e = executable_from_argv0();
  ASSERT_TRUE(e) << e.reason;
  EXPECT_EQ(*e, this_binary());
  fs::remove_all(dir);
}

TEST(Platform, ResolveProgramSaysWhyNot) {
  const auto dir = test::temp_dir("platform_resolve");
  put(dir / "not_exec", "x");
  fs::create_directories(dir / "adir");
  EXPECT_TRUE(contains(resolve_program("", "/", "/bin").reason, "argv[0] is empty"));
  EXPECT_TRUE(contains(resolve_program("./missing", dir.string(), "").reason, "not an executable file"));
  EXPECT_TRUE(contains(resolve_program("./not_exec", dir.string(), "").reason, "not an executable file"));
  EXPECT_TRUE(contains(resolve_program("./adir", dir.string(), "").reason, "not an executable file"));
  EXPECT_TRUE(contains(resolve_program("rel/x", "", "").reason, "initial cwd is unknown"));
  EXPECT_TRUE(contains(resolve_program("nope-xyz", "/", dir.string()).reason, "'nope-xyz' not found in $PATH"));
  EXPECT_TRUE(contains(resolve_program("nope-xyz", "/", "").reason, "$PATH is empty"));
  const auto sh = resolve_program("sh", "/", "/nonexistent:/bin:/usr/bin");  // a program every POSIX box has
  ASSERT_TRUE(sh) << sh.reason;
  EXPECT_EQ(sh->front(), '/');
  fs::remove_all(dir);
}

TEST(Platform, RssIsSaneAndGrowsWithATouchedAllocation) {
  const auto before = process_memory();
  ASSERT_TRUE(before) << before.reason;
#if defined(__linux__)
  EXPECT_FALSE(before->peak);  // /proc is mounted here: the current RSS, not the peak
#endif
  EXPECT_GT(before->rss_mb, 1.0);
  EXPECT_LT(before->rss_mb, 64.0 * 1024);
  constexpr size_t kBytes = size_t(256) << 20;
  std::unique_ptr<char[]> big(new char[kBytes]);
  std::memset(big.get(), 1, kBytes);
  asm volatile("" : : "r"(big.get()) : "memory");  // the pages are written before RSS is read
  const auto after = process_memory();
  ASSERT_TRUE(after) << after.reason;
  EXPECT_GT(after->rss_mb - before->rss_mb, 200.0) << before->rss_mb << " -> " << after->rss_mb;
  volatile char sink = big[kBytes - 1];
  (void)sink;
  const auto peak = peak_rss_mb();
  ASSERT_TRUE(peak) << peak.reason;
  EXPECT_GE(*peak + 1.0, after->rss_mb);  // the peak is at least the current figure (1 MiB of page rounding)
  const auto other = process_memory(int64_t(::getpid()));  // the per-pid reader, pointed at ourselves
  ASSERT_TRUE(other) << other.reason;
  EXPECT_NEAR(other->rss_mb, after->rss_mb, 32.0);
  EXPECT_FALSE(process_memory(int64_t(0)));
}

TEST(Platform, LoadCpuAndMemoryOfThisMachine) {
  const auto l = load_average();
  ASSERT_TRUE(l) << l.reason;
  EXPECT_GE(l->one, 0.0);
  EXPECT_FALSE(contains(format_load(l), "unavailable"));
  const auto t0 = cpu_ticks();
  ASSERT_TRUE(t0) << t0.reason;
  EXPECT_GE(t0->cores, 1);
  volatile double x = 0;
  for (int i = 0; i < 50'000'000; ++i) x = x + 1e-9 * i;  // burn some CPU so the counters move
  const auto t1 = cpu_ticks();
  ASSERT_TRUE(t1) << t1.reason;
  const auto pct = cpu_percent(*t0, *t1);
  ASSERT_TRUE(pct) << pct.reason;
  EXPECT_GE(*pct, 0.0);
  EXPECT_LE(*pct, 100.0 * t1->cores + 1e-9);
  const auto m = machine_memory();
  ASSERT_TRUE(m) << m.reason;
  EXPECT_GT(m->total_mb, 64.0);
  EXPECT_GT(m->available_mb, 0.0);
  EXPECT_LE(m->available_mb, m->total_mb);
}

TEST(Platform, CpuPercentFromTickDeltas) {
  // +150 busy over 200 ticks on 2 cores -> 150% of one core.
  const auto p = cpu_percent({200, 1000, 2}, {350, 1200, 2});
  ASSERT_TRUE(p);
  EXPECT_NEAR(*p, 150.0, 1e-9);
  EXPECT_TRUE(contains(cpu_percent({1, 10, 2}, {1, 10, 2}).reason, "no CPU time passed"));
  EXPECT_EQ(format_load(Reading<LoadAverage>::unavailable("x")), "unavailable (x)");
}

TEST(Procfs, FakeTreeParses) {
  const auto root = test::temp_dir("procfs_ok");
  put(root / "self/statm", "1000 256 10 1 0 100 0\n");
  put(root / "42/status", "Name:\tx\nVmPeak:\t 999 kB\nVmRSS:\t  204800 kB\n");
  put(root / "stat",
      "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\ncpu1 50 0 50 400 0 0 0 0 0 0\n"
      "intr 1 2 3\n");
  put(root / "meminfo", "MemTotal:       2048000 kB\nMemFree: 1 kB\nMemAvailable:   1024000 kB\n");
  fs::create_directories(root / "self");
  fs::create_symlink("/opt/anelab/bin/anelab", root / "self/exe");
  const auto s = procfs::self_memory(root.string());
  ASSERT_TRUE(s) << s.reason;
  EXPECT_NEAR(s->rss_mb, 256.0 * double(::sysconf(_SC_PAGESIZE)) / (1 << 20), 1e-9);
  const auto p = procfs::pid_memory(root.string(), 42);
  ASSERT_TRUE(p) << p.reason;
  EXPECT_NEAR(p->rss_mb, 200.0, 1e-9);
  const auto t = procfs::cpu_ticks(root.string());
  ASSERT_TRUE(t) << t.reason;
  EXPECT_EQ(t->cores, 2);
  EXPECT_EQ(t->total, 1000u);
  EXPECT_EQ(t->busy, 200u);
  const auto m = procfs::machine_memory(root.string());
  ASSERT_TRUE(m) << m.reason;
  EXPECT_NEAR(m->total_mb, 2000.0, 1e-9);
  EXPECT_NEAR(m->available_mb, 1000.0, 1e-9);
  const auto e = procfs::self_exe(root.string());
  ASSERT_TRUE(e) << e.reason;
  EXPECT_EQ(*e, "/opt/anelab/bin/anelab");
  put(root / "self/smaps_rollup",
      "00400000-7fff [rollup]\nRss:  9000 kB\nAnonymous:  8192 kB\nAnonHugePages:  6144 kB\n");
  const auto h = procfs::self_anon_huge_mb(root.string());
  ASSERT_TRUE(h) << h.reason;
  EXPECT_NEAR(*h, 6.0, 1e-9);
  put(root / "thp", "always [madvise] never\n");
  const auto mode = procfs::sysfs_mode((root / "thp").string());
  ASSERT_TRUE(mode) << mode.reason;
  EXPECT_EQ(*mode, "madvise");
  put(root / "thp", "[always] madvise never\n");
  EXPECT_EQ(*procfs::sysfs_mode((root / "thp").string()), "always");
  fs::remove_all(root);
}

// Weights read into memory (FileAccess::kRead) sit in this region: 2 MiB aligned, zero-filled, writable,
// and on Linux with THP on, advised for huge pages (the kernel's own record: smaps THPeligible 1).
TEST(Platform, AnonymousRegionIsAlignedZeroedAndAdvised) {
  constexpr size_t kHuge = size_t{2} << 20, kBytes = 5 * kHuge + 12345;
  auto r = map_anonymous(kBytes, /*huge_pages=*/true);
  ASSERT_TRUE(r) << r.reason;
  ASSERT_NE(r->data, nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(r->data) % kHuge, 0u);
  EXPECT_EQ(r->size, kBytes);
  auto* p = static_cast<unsigned char*>(r->data);
  EXPECT_GE(static_cast<unsigned char*>(r->base) + r->mapped, p + kBytes);
  EXPECT_EQ(p[0] | p[kBytes / 2] | p[kBytes - 1], 0);
  p[0] = 1, p[kBytes - 1] = 2;  // writable to its last byte
  EXPECT_EQ(p[0] + p[kBytes - 1], 3);
  const auto thp = transparent_huge_pages();
  if (thp) {
    EXPECT_TRUE(r->huge_pages) << r->huge_pages.reason;
    EXPECT_EQ(*r->huge_pages, *thp);
#if defined(ANELAB_TESTS_UNDER_EMULATOR)
    std::printf("[ note ] under qemu-user: its /proc/self/smaps says THPeligible 0 for every mapping; not checked\n");
#else
    // The kernel's view of the mapping.
    std::ifstream smaps("/proc/self/smaps");
    std::string line, eligible;
    bool in = false;
    while (std::getline(smaps, line)) {
      unsigned long long lo = 0, hi = 0;
      if (std::sscanf(line.c_str(), "%llx-%llx ", &lo, &hi) == 2 && line.find(':') > line.find(' '))
        in = lo <= reinterpret_cast<uintptr_t>(p) && reinterpret_cast<uintptr_t>(p) < hi;
      else if (in && line.rfind("THPeligible:", 0) == 0)
        eligible = line.substr(12);
    }
    if (eligible.empty())
      std::printf("[ note ] /proc/self/smaps has no THPeligible line for the region (a kernel before 4.15?)\n");
    else
      EXPECT_EQ(std::stoi(eligible), 1) << "the region is not eligible for transparent huge pages";
#endif
  } else {
    EXPECT_FALSE(r->huge_pages);
    EXPECT_EQ(r->huge_pages.reason, thp.reason);
    std::printf("[ note ] no transparent huge pages here: %s\n", thp.reason.c_str());
  }
  unmap_anonymous(*r.value);
  EXPECT_EQ(r->data, nullptr);
  EXPECT_EQ(r->base, nullptr);
  auto plain = map_anonymous(100, /*huge_pages=*/false);
  ASSERT_TRUE(plain) << plain.reason;
  EXPECT_FALSE(plain->huge_pages);
  unmap_anonymous(*plain.value);
  auto small = map_anonymous(kHuge - 1, /*huge_pages=*/true);  // no whole huge page: no advice
  ASSERT_TRUE(small) << small.reason;
  EXPECT_EQ(small->huge_pages.reason, "smaller than one huge page (2 MiB)");
  unmap_anonymous(*small.value);
  auto empty = map_anonymous(0, true);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->data, nullptr);
}

TEST(Procfs, MissingAndMalformedFilesSayWhy) {
  const auto root = test::temp_dir("procfs_bad");
  const std::string r = root.string();
  // missing
  EXPECT_TRUE(contains(procfs::self_memory(r).reason, "cannot open " + r + "/self/statm"));
  EXPECT_TRUE(contains(procfs::pid_memory(r, 7).reason, "cannot open " + r + "/7/status"));
  EXPECT_TRUE(contains(procfs::cpu_ticks(r).reason, "cannot open " + r + "/stat"));
  EXPECT_TRUE(contains(procfs::machine_memory(r).reason, "cannot open " + r + "/meminfo"));
  EXPECT_TRUE(contains(procfs::self_exe(r).reason, "readlink " + r + "/self/exe"));
  EXPECT_TRUE(contains(procfs::pid_memory(r, -1).reason, "no process"));
  // empty / malformed
  put(root / "self/statm", "");
  EXPECT_TRUE(contains(procfs::self_memory(r).reason, "is empty"));
  put(root / "self/statm", "12 banana\n");
  EXPECT_TRUE(contains(procfs::self_memory(r).reason, "malformed")) << procfs::self_memory(r).reason;
  put(root / "7/status", "Name:\tx\nVmSize:\t 10 kB\n");
  EXPECT_TRUE(contains(procfs::pid_memory(r, 7).reason, "no VmRSS: line"));
  put(root / "7/status", "VmRSS:\t lots kB\n");
  EXPECT_TRUE(contains(procfs::pid_memory(r, 7).reason, "malformed VmRSS: line"));
  put(root / "7/status", "VmRSS:\t 10 MB\n");
  EXPECT_TRUE(contains(procfs::pid_memory(r, 7).reason, "unit 'MB'"));
  put(root / "stat", "intr 1 2 3\n");
  EXPECT_TRUE(contains(procfs::cpu_ticks(r).reason, "no 'cpu ' summary line"));
  put(root / "stat", "cpu  1 2\ncpu0 1 2\n");  // truncated
  EXPECT_TRUE(contains(procfs::cpu_ticks(r).reason, "fewer than 4 counters"));
  put(root / "stat", "cpu  1 2 3 4\n");
  EXPECT_TRUE(contains(procfs::cpu_ticks(r).reason, "no per-core"));
  put(root / "meminfo", "MemTotal: 100 kB\nMemFree: 1 kB\n");
  EXPECT_TRUE(contains(procfs::machine_memory(r).reason, "no MemAvailable: line"));
  EXPECT_TRUE(contains(procfs::self_anon_huge_mb(r).reason, "cannot open " + r + "/self/smaps_rollup"));
  put(root / "self/smaps_rollup", "Rss: 10 kB\n");
  EXPECT_TRUE(contains(procfs::self_anon_huge_mb(r).reason, "no AnonHugePages: line"));
  EXPECT_TRUE(contains(procfs::sysfs_mode(r + "/thp").reason, "cannot open " + r + "/thp"));
  put(root / "thp", "always madvise never\n");
  EXPECT_TRUE(contains(procfs::sysfs_mode(r + "/thp").reason, "no [selected] mode"))
      << procfs::sysfs_mode(r + "/thp").reason;
  fs::remove_all(root);
}

// Issue 35 item 5: the OS calls the framework, train, serve and dashboard made themselves (ftruncate, mmap of a
// file, kill, execv, SIGPIPE, the stop signals) are platform functions; each works and says why when it fails.
TEST(Platform, FileTruncateAndReadOnlyMapping) {
  const fs::path p = fs::path(test::temp_dir("platform_files")) / "f.bin";
  put(p, "0123456789");
  const int fd = ::open(p.c_str(), O_RDWR);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(truncate_file(fd, 4), "");
  EXPECT_EQ(fs::file_size(p), 4u);
  const auto m = map_file_readonly(fd, 4);
  ASSERT_TRUE(m) << m.reason;
  EXPECT_EQ(std::memcmp(*m, "0123", 4), 0);
  unmap_file(*m, 4);
  EXPECT_NE(truncate_file(-1, 0), "");  // a bad descriptor: the reason
  EXPECT_FALSE(map_file_readonly(-1, 4));
  EXPECT_NE(map_file_readonly(-1, 4).reason, "");
  ::close(fd);
  fs::remove_all(p.parent_path());
}

TEST(Platform, SignalsAndExecSayWhyNot) {
  EXPECT_EQ(send_signal(process_id(), 0), "");  // signal 0: the process exists
  EXPECT_NE(send_signal(0, 0), "");             // never the process group
  EXPECT_NE(send_signal(-5, 0), "");
  EXPECT_NE(exec_replace("/nonexistent/anelab-no-such-program", {"x"}), "");  // returns: it failed
  ignore_broken_pipe_signal();
  EXPECT_EQ(take_stop_signal(), 0);  // none pending: 0, without blocking
}

}  // namespace
}  // namespace anelab::platform
