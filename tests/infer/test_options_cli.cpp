// Issue 35 item 3, options once: every subcommand that takes CPU threads has the one -t/--threads option of
// cli/options.h (same help, range and default), accepts "-t 2" / "--threads 2", and refuses 0 and "abc" with
// one line naming the flag and the value; the sampling flags of `infer generate` accept exactly the values
// that `serve`'s request parser accepts (one table, infer/params_check.h).
#include <gtest/gtest.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/options.h"
#include "infer/params_check.h"
#include "infer/server/api.h"
#include "tests/infer/test_cli_helpers.h"

namespace anelab {
namespace {

// Every subcommand with CPU threads, as the words after `anelab`.
const std::vector<std::vector<std::string>> kThreaded = {{"infer", "generate"},
                                                         {"infer", "chat"},
                                                         {"infer", "logits"},
                                                         {"infer", "bench"},
                                                         {"serve"},
                                                         {"perplexity"},
                                                         {"train"},
                                                         {"demo"},
                                                         {"bench", "emulator"},
                                                         {"bench", "memory"},
                                                         {"bench", "train"},
                                                         {"probe"}};

// The `anelab` program's command tree (main.cpp's registrations), without running anything.
struct Commands {
  CLI::App app;
  Commands() {
    cli::add_demo_command(app);
    cli::add_bench_commands(app);
    cli::add_train_command(app);
    cli::add_infer_command(app);
    cli::add_perplexity_command(app);
    cli::add_serve_command(app);
    cli::add_probe_command(app);
  }
  CLI::App* find(const std::vector<std::string>& path) {
    CLI::App* a = &app;
    for (const auto& w : path) a = a->get_subcommand(w);
    return a;
  }
};

std::string joined(const std::vector<std::string>& path) {
  std::string s;
  for (const auto& w : path) s += (s.empty() ? "" : " ") + w;
  return s;
}

// Gives `opt` the value `v` as the parser would (conversion and validators); "" when taken, else the error.
std::string give(CLI::Option* opt, const std::string& v) {
  opt->clear();
  opt->add_result(v);
  try {
    opt->run_callback();
  } catch (const CLI::ParseError& e) {
    return e.what();
  }
  return "";
}

// The message quotes the value as the user wrote it: "must be in [1, 1024] (got 0)", "'abc' is not a number".
bool names_value(const std::string& msg, const std::string& v) {
  return msg.find("(got " + v + ")") != std::string::npos || msg.find("'" + v + "'") != std::string::npos;
}

TEST(OptionsCli, EverySubcommandHasTheOneThreadsOption) {
  Commands c;
  CLI::App ref;
  int ref_threads = cli::kDefaultThreads;
  const CLI::Option* want = cli::add_threads_option(&ref, ref_threads);
  for (const auto& path : kThreaded) {
    SCOPED_TRACE(joined(path));
    CLI::App* sub = c.find(path);
    CLI::Option* t = sub->get_option_no_throw("--threads");
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(sub->get_option_no_throw("-t"), t);
    EXPECT_EQ(t->get_description(), want->get_description());
    EXPECT_EQ(t->get_default_str(), std::to_string(cli::kDefaultThreads));
    EXPECT_EQ(give(t, "2"), "");
    EXPECT_EQ(t->as<int>(), 2);
    EXPECT_EQ(give(t, "1024"), "");
    for (const char* bad : {"0", "abc", "1025", "-1"}) {
      const std::string e = give(t, bad);
      EXPECT_NE(e.find("--threads"), std::string::npos) << bad << ": " << e;
      EXPECT_TRUE(names_value(e, bad)) << e;
    }
  }
}

// The program itself: "-t 2" and "--threads 2" pass the parser (the run then fails on the missing model file),
// 0 and abc stop it (exit 2) with one line naming the flag and the value, before a model file is looked for.
TEST(OptionsCli, ProgramRefusesBadThreadsInOneLine) {
  for (const auto& path : kThreaded) {
    const std::string cmd = joined(path);
    SCOPED_TRACE(cmd);
    for (const char* bad : {"0", "abc"}) {
      const test::Out r = test::anelab(cmd + " --threads " + bad, 30);
      EXPECT_EQ(r.rc, 2) << r.err;
      const size_t at = r.err.find("--threads");
      ASSERT_NE(at, std::string::npos) << r.err;
      const std::string line = r.err.substr(at, r.err.find('\n', at) - at);
      EXPECT_TRUE(names_value(line, bad)) << r.err;
    }
  }
  for (const char* good : {"-t 2", "--threads 2"}) {  // parsed; the missing file is the (runtime) error
    for (const char* cmd : {"infer generate -p x", "perplexity --text /nonexistent.txt"}) {
      const test::Out r = test::anelab(std::string(cmd) + " -m /nonexistent/model.bin " + good, 30);
      EXPECT_EQ(r.rc, 1) << cmd << " " << good << ": " << r.err;
      EXPECT_EQ(r.err.find("threads"), std::string::npos) << r.err;
    }
  }
}

// Each sampling flag of `infer generate` takes a value exactly when the server takes the same request field.
TEST(OptionsCli, SamplingFlagsParseAsTheServersRequests) {
  Commands c;
  CLI::App* gen = c.find({"infer", "generate"});
  struct Param {
    const char* flag;
    infer::ParamRange range;
  };
  namespace P = infer::params;
  const Param params[] = {{"--temperature", P::kTemperature},
                          {"--top-p", P::kTopP},
                          {"--top-k", P::kTopK},
                          {"--min-p", P::kMinP},
                          {"--repeat-penalty", P::kRepeatPenalty}};
  serve::Limits lim;
  for (const Param& p : params) {
    const double lo = p.range.lo, hi = p.range.hi;
    const double span = hi - lo;
    // the bounds, just outside them, and inside (integers for top_k)
    const bool integer = std::string(p.range.name) == "top_k";
    std::vector<double> values = {lo, hi, lo - 1, hi + 1, lo + span / 2};
    if (!integer) values.insert(values.end(), {lo - span * 1e-3, hi + span * 1e-3});
    for (double v : values) {
      char text[64];
      std::snprintf(text, sizeof text, integer ? "%.0f" : "%.17g", v);
      const std::string body = std::string("{\"prompt\":\"x\",\"") + p.range.name + "\":" + text + "}";
      serve::CompletionRequest req;
      const bool server_takes = !serve::parse_request(serve::Endpoint::kCompletions, body, lim, req).has_value();
      const bool cli_takes = give(gen->get_option(p.flag), text).empty();
      EXPECT_EQ(cli_takes, server_takes) << p.flag << " " << text;
      EXPECT_EQ(cli_takes, infer::range_error(p.range, v).empty()) << p.flag << " " << text;
    }
  }
  CLI::App* chat = c.find({"infer", "chat"});  // chat has the same group
  for (const Param& p : params)
    EXPECT_EQ(chat->get_option(p.flag)->get_description(), gen->get_option(p.flag)->get_description()) << p.flag;
}

}  // namespace
}  // namespace anelab
