// The CLI faced with hostile or oversized inputs (issue 34): a GGUF whose tensor name holds terminal escape
// sequences is quoted escaped by `anelab info` and `anelab infer` (never raw), and a context whose KV cache
// cannot fit in memory is refused up front with one line naming the size and the flags that shrink it.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "framework/core/platform.h"
#include "infer/engine.h"
#include "models/formats/anelab_file.h"
#include "models/formats/gguf.h"
#include "models/io/export.h"
#include "models/io/gguf_model.h"
#include "models/presets.h"
#include "tests/common/test_data.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab {
namespace {

// OSC 0 (set the window title) ended by BEL, then SGR 31 (red): what the attack put in a tensor name.
const std::string kHostile = "blk.0.\x1b]0;pwned\x07\x1b[31mred";
const std::string kHostileEscaped = "blk.0.\\x1b]0;pwned\\x07\\x1b[31mred";

bool has_raw_controls(const std::string& s) {
  for (unsigned char c : s)
    if (c == 0x1b || c == 0x07 || c == 0x9b) return true;
  return false;
}

TEST(CliUntrusted, EscapeSequencesInAGgufTensorNameArePrintedEscaped) {
  const auto dir = test::temp_dir("hostile_gguf");
  const std::string path = (dir / "hostile.gguf").string();
  models::ModelConfig c = models::preset("stories260k");
  const models::Model m = models::random_model(c, 7);
  models::GgufWriter w = models::gguf_writer_for(m);
  w.add_tensor(kHostile, models::ggml_type_of(models::DType::kF32), {4}, std::vector<uint8_t>(16, 0));
  w.write(path);
  for (const std::string& cmd :
       {"info " + path, "infer generate -m " + path + " --prompt-ids '1 2' -n 2 --backend cpu --threads 1"}) {
    const test::Out r = test::anelab(cmd);
    EXPECT_EQ(r.rc, 1) << cmd << "\n" << r.err;
    EXPECT_FALSE(has_raw_controls(r.out + r.err)) << cmd;
    EXPECT_NE(r.err.find(kHostileEscaped), std::string::npos) << cmd << ": " << r.err;
  }
}

TEST(CliUntrusted, KvCacheRefusalNamesTheSizeAndTheFlags) {
  const int64_t bpp = 2 * 8 * 4096 * 4;  // K and V, 8 layers, kv_dim 4096, fp32
  const auto mem = [](double avail_mb) {
    return platform::Reading<platform::MachineMemory>::ok({4 * avail_mb, avail_mb});
  };
  EXPECT_EQ(infer::kv_cache_refusal(1000, bpp, infer::KvType::kF32, 8, 4096,
                                    platform::Reading<platform::MachineMemory>::unavailable("no procfs")),
            "");
  EXPECT_EQ(infer::kv_cache_refusal(1000, bpp, infer::KvType::kF32, 8, 4096, mem(1000.0 * bpp / (1 << 20))), "");
  // 1001 positions in the memory of 1000: refused, and --ctx 1000 is what fits.
  const std::string why =
      infer::kv_cache_refusal(1001, bpp, infer::KvType::kF32, 8, 4096, mem(1000.0 * bpp / (1 << 20)));
  EXPECT_NE(why.find("KV cache of 1001 positions x 262144 bytes"), std::string::npos) << why;
  EXPECT_NE(why.find("--ctx 1000 or less fits"), std::string::npos) << why;
  EXPECT_NE(why.find("--kv-type f16"), std::string::npos) << why;
  const std::string f16 =
      infer::kv_cache_refusal(1001, bpp / 2, infer::KvType::kF16, 8, 4096, mem(1000.0 * bpp / 2 / (1 << 20)));
  EXPECT_EQ(f16.find("--kv-type f16"), std::string::npos) << f16;  // already f16: not suggested again
}

TEST(CliUntrusted, HugeContextIsRefusedInOneLine) {
  // 8 layers x kv_dim 4096 x 2^22 positions: a 1 TiB fp32 KV cache (512 GiB in f16) that no test machine has,
  // in a model file of a few MiB (dim 64).
  const auto dir = test::temp_dir("huge_ctx");
  const std::string path = (dir / "wide.anelab").string();
  models::ModelConfig c = models::preset("stories260k");
  c.dim = 64, c.hidden_dim = 64, c.n_layers = 8, c.n_heads = 8, c.n_kv_heads = 8, c.head_dim = 512;
  c.max_seq_len = 1 << 22;
  models::save_model(models::random_model(c, 3), path, models::DType::kF16);
  const auto avail = platform::machine_memory();
  if (!avail) GTEST_SKIP() << "available memory unknown here: " << avail.reason;
  const std::string gen = "infer generate -m " + path + " --prompt-ids '1 2' -n 2 --backend cpu --threads 1";
  for (const std::string kv : {"f32", "f16"}) {
    const test::Out r = test::anelab(gen + " --quiet --kv-type " + kv);
    EXPECT_EQ(r.rc, 1) << r.err;
    EXPECT_NE(r.err.find("KV cache of 4194304 positions"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("--ctx "), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("--kv-type f16") != std::string::npos, kv == "f32") << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  const test::Out ok = test::anelab(gen + " --quiet --ctx 64");  // the flag it names makes it run
  EXPECT_EQ(ok.rc, 0) << ok.err;
}

}  // namespace
}  // namespace anelab
