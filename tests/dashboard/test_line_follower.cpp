// LineFollower: growing file, partial last line, truncation, replacement, rewrite, CRLF, long lines.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dashboard/line_follower.h"
#include "tests/common/test_data.h"

namespace anelab::dashboard {
namespace {

void append(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::app | std::ios::binary);
  f << s;
}
void overwrite(const std::filesystem::path& p, const std::string& s) {
  std::ofstream f(p, std::ios::trunc | std::ios::binary);
  f << s;
}
std::vector<std::string> texts(const PollResult& r) {
  std::vector<std::string> v;
  for (auto& l : r.lines) v.push_back(l.text);
  return v;
}

TEST(LineFollower, MissingFileIsNotAnError) {
  auto dir = test::temp_dir("lf_missing");
  LineFollower f((dir / "events.jsonl").string());
  auto r = f.poll();
  EXPECT_FALSE(r.exists);
  EXPECT_TRUE(r.error.empty());
  EXPECT_TRUE(r.lines.empty());
  append(dir / "events.jsonl", "a\n");
  r = f.poll();
  EXPECT_TRUE(r.exists);
  EXPECT_EQ(texts(r), std::vector<std::string>({"a"}));
}

TEST(LineFollower, GrowingFileAndPartialLastLine) {
  auto dir = test::temp_dir("lf_grow");
  auto p = dir / "events.jsonl";
  append(p, "one\ntwo\nthr");
  LineFollower f(p.string());
  auto r = f.poll();
  EXPECT_EQ(texts(r), std::vector<std::string>({"one", "two"}));
  EXPECT_EQ(r.lines[1].number, 2u);
  EXPECT_EQ(f.pending_bytes(), 3u);
  EXPECT_TRUE(f.poll().lines.empty());  // nothing new: the partial line stays pending
  append(p, "ee\r\nfour");
  r = f.poll();
  EXPECT_EQ(texts(r), std::vector<std::string>({"three"}));
  EXPECT_EQ(r.lines[0].number, 3u);
  append(p, "\n");
  r = f.poll();
  EXPECT_EQ(texts(r), std::vector<std::string>({"four"}));
  EXPECT_EQ(f.lines_read(), 4u);
  EXPECT_FALSE(r.reset);
}

TEST(LineFollower, SmallReadChunksGiveTheSameLines) {
  auto dir = test::temp_dir("lf_chunks");
  auto p = dir / "events.jsonl";
  std::string all;
  for (int i = 0; i < 50; ++i) all += "line number " + std::to_string(i) + "\n";
  overwrite(p, all);
  LineFollower f(p.string());
  std::vector<std::string> got;
  for (int i = 0; i < 2000 && f.offset() < all.size(); ++i)
    for (auto& s : texts(f.poll(7))) got.push_back(s);
  ASSERT_EQ(got.size(), 50u);
  EXPECT_EQ(got[0], "line number 0");
  EXPECT_EQ(got[49], "line number 49");
}

TEST(LineFollower, TruncationResetsAndRereads) {
  auto dir = test::temp_dir("lf_trunc");
  auto p = dir / "events.jsonl";
  overwrite(p, "aaaa\nbbbb\ncccc\n");
  LineFollower f(p.string());
  EXPECT_EQ(f.poll().lines.size(), 3u);
  overwrite(p, "x\n");
  auto r = f.poll();
  EXPECT_TRUE(r.reset);
  EXPECT_EQ(texts(r), std::vector<std::string>({"x"}));
  EXPECT_EQ(r.lines[0].number, 1u);
  EXPECT_EQ(f.resets(), 1u);
}

TEST(LineFollower, RewriteInPlaceWithSameOrLargerSizeIsDetected) {
  auto dir = test::temp_dir("lf_rewrite");
  auto p = dir / "events.jsonl";
  overwrite(p, "first\n");
  LineFollower f(p.string());
  EXPECT_EQ(f.poll().lines.size(), 1u);
  overwrite(p, "other\nmore lines\n");  // truncated and regrown between two polls
  auto r = f.poll();
  EXPECT_TRUE(r.reset);
  EXPECT_EQ(texts(r), std::vector<std::string>({"other", "more lines"}));
}

TEST(LineFollower, ReplacedFileIsReadFromTheStart) {
  auto dir = test::temp_dir("lf_replace");
  auto p = dir / "events.jsonl";
  overwrite(p, "old1\nold2\n");
  LineFollower f(p.string());
  EXPECT_EQ(f.poll().lines.size(), 2u);
  overwrite(dir / "tmp", "old1\nold2\nnew3\n");  // same prefix, new inode
  std::filesystem::rename(dir / "tmp", p);
  auto r = f.poll();
  EXPECT_TRUE(r.reset);
  EXPECT_EQ(r.lines.size(), 3u);
}

TEST(LineFollower, DeletedFileResetsAndWaits) {
  auto dir = test::temp_dir("lf_delete");
  auto p = dir / "events.jsonl";
  overwrite(p, "a\n");
  LineFollower f(p.string());
  f.poll();
  std::filesystem::remove(p);
  auto r = f.poll();
  EXPECT_TRUE(r.reset);
  EXPECT_FALSE(r.exists);
  overwrite(p, "b\n");
  EXPECT_EQ(texts(f.poll()), std::vector<std::string>({"b"}));
}

TEST(LineFollower, OverLongLineIsReportedOnceAndSkipped) {
  auto dir = test::temp_dir("lf_long");
  auto p = dir / "events.jsonl";
  std::string big(LineFollower::kMaxLine + 100, 'x');
  overwrite(p, "ok\n" + big + "\nafter\n");
  LineFollower f(p.string());
  std::vector<FollowedLine> all;
  for (int i = 0; i < 10; ++i)
    for (auto& l : f.poll(4u << 20).lines) all.push_back(l);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_FALSE(all[0].too_long);
  EXPECT_TRUE(all[1].too_long);
  EXPECT_EQ(all[1].number, 2u);
  EXPECT_LE(all[1].text.size(), 200u);
  EXPECT_EQ(all[2].text, "after");
  EXPECT_EQ(all[2].number, 3u);
}

TEST(LineFollower, UnreadablePathReportsAnError) {
  auto dir = test::temp_dir("lf_perm");
  auto p = dir / "events.jsonl";
  std::filesystem::create_directories(p);  // a directory where the file should be: unreadable for everyone
  LineFollower f(p.string());
  auto r = f.poll();
  EXPECT_FALSE(r.error.empty());
  EXPECT_TRUE(r.lines.empty());
}

}  // namespace
}  // namespace anelab::dashboard
