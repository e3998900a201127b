// SegmentLog: records come back in order across segments after a restart, a write cut short at a segment's end is
// dropped (it was never acknowledged), and damage anywhere else is DATA_LOSS naming the file.
#include "libs/journal/segment_log.h"

#include <filesystem>
#include <fstream>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/status_matchers.h"
#include "tests/support/subprocess.h"

namespace corral {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

std::string Bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(SegmentLogTest, RecordsComeBackInOrderAcrossSegmentsAndANewSegmentFollows) {
  const std::string prefix = testing::MakeTestDir() + "/j.db-log";
  {
    std::vector<SegmentLog::Segment> left;
    auto log = SegmentLog::Open(prefix, /*segment_bytes=*/38, &left);
    ASSERT_THAT(log, IsOk());
    EXPECT_THAT(left, IsEmpty());
    EXPECT_EQ((*log)->current(), 1);
    // Each frame is 8 + 11 bytes: the second append fills segment 1 to 38 and seals it.
    ASSERT_THAT((*log)->Append("record-0001"), IsOk());
    EXPECT_THAT((*log)->TakeSealed(), IsEmpty());
    ASSERT_THAT((*log)->Append("record-0002"), IsOk());
    EXPECT_THAT((*log)->TakeSealed(), ElementsAre(1));
    ASSERT_THAT((*log)->Append("record-0003"), IsOk());
    EXPECT_THAT((*log)->TakeSealed(), IsEmpty());
    EXPECT_EQ((*log)->current(), 2);
    EXPECT_THAT((*log)->Append(""), StatusIs(absl::StatusCode::kInvalidArgument));  // zero length ends the data
  }
  std::vector<SegmentLog::Segment> left;
  auto log = SegmentLog::Open(prefix, 38, &left);
  ASSERT_THAT(log, IsOk());
  ASSERT_EQ(left.size(), 2u);
  EXPECT_EQ(left[0].number, 1);
  EXPECT_THAT(left[0].records, ElementsAre("record-0001", "record-0002"));
  EXPECT_EQ(left[1].path, prefix + ".2");
  EXPECT_THAT(left[1].records, ElementsAre("record-0003"));
  EXPECT_EQ((*log)->current(), 3);
  (*log)->Remove(1);
  EXPECT_FALSE(std::filesystem::exists(prefix + ".1"));
  EXPECT_TRUE(std::filesystem::exists(prefix + ".2"));
}

TEST(SegmentLogTest, AWriteCutShortAtTheEndIsDroppedAndDamageElsewhereIsDataLoss) {
  const std::string prefix = testing::MakeTestDir() + "/j.db-log";
  {
    std::vector<SegmentLog::Segment> left;
    auto log = SegmentLog::Open(prefix, 1 << 20, &left);
    ASSERT_THAT(log, IsOk());
    ASSERT_THAT((*log)->Append("first"), IsOk());
    ASSERT_THAT((*log)->Append("second"), IsOk());
  }
  const std::string whole = Bytes(prefix + ".1");
  ASSERT_EQ(whole.size(), 8u + 5 + 8 + 6);
  // Cut inside the second frame's bytes, or inside its header: only the first record was ever complete.
  EXPECT_THAT(ParseSegment(whole.substr(0, whole.size() - 2), "s"), IsOkAndHolds(ElementsAre("first")));
  EXPECT_THAT(ParseSegment(whole.substr(0, 13 + 5), "s"), IsOkAndHolds(ElementsAre("first")));
  // Zeros where a machine crash left blocks unwritten: the data ends there.
  EXPECT_THAT(ParseSegment(whole.substr(0, 13) + std::string(4096, '\0'), "s"), IsOkAndHolds(ElementsAre("first")));
  // The last frame complete but its bytes garbled (a torn write): dropped too.
  std::string torn = whole;
  torn.back() = 'X';
  EXPECT_THAT(ParseSegment(torn, "s"), IsOkAndHolds(ElementsAre("first")));
  // The first frame garbled while a whole one follows: not a torn write.
  std::string damaged = whole;
  damaged[9] = 'X';
  EXPECT_THAT(ParseSegment(damaged, "seg.7"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg.7 is damaged at offset 0")));
  std::ofstream(prefix + ".1", std::ios::binary | std::ios::trunc) << damaged;
  std::vector<SegmentLog::Segment> left;
  EXPECT_THAT(SegmentLog::Open(prefix, 1 << 20, &left),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr(prefix + ".1")));
}

}  // namespace
}  // namespace corral
