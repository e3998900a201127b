#include "libs/core/utf8.h"

#include "gtest/gtest.h"

namespace corral {
namespace {

TEST(ToValidUtf8, KeepsWellFormedTextByteForByte) {
  const std::string text = "plain ascii, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x90\x8E, tab\t too";
  EXPECT_EQ(ToValidUtf8(text), text);
  EXPECT_EQ(ToValidUtf8(""), "");
}

TEST(ToValidUtf8, ReplacesEachIllFormedRunOnce) {
  EXPECT_EQ(ToValidUtf8("a\xFF"
                        "b"),
            "a\xEF\xBF\xBD"
            "b");  // a byte never used in UTF-8
  EXPECT_EQ(ToValidUtf8("a\x80\x80"
                        "b"),
            "a\xEF\xBF\xBD"
            "b");                                              // stray continuation bytes
  EXPECT_EQ(ToValidUtf8("a\xE2\x82"), "a\xEF\xBF\xBD");        // truncated at the end
  EXPECT_EQ(ToValidUtf8("\xC0\xAF"), "\xEF\xBF\xBD");          // overlong '/'
  EXPECT_EQ(ToValidUtf8("\xED\xA0\x80"), "\xEF\xBF\xBD");      // a surrogate
  EXPECT_EQ(ToValidUtf8("\xF4\x90\x80\x80"), "\xEF\xBF\xBD");  // past U+10FFFF
  EXPECT_EQ(ToValidUtf8("\xE2\x82"
                        "x\xC3\xA9"),
            "\xEF\xBF\xBD"
            "x\xC3\xA9");  // resumes at the next character
}

TEST(LastLine, TakesTheLastNonEmptyLineCutOnACharacterBoundary) {
  EXPECT_EQ(LastLine("first\nsecond  \n\n  \n", 80), "second");
  EXPECT_EQ(LastLine("only", 80), "only");
  EXPECT_EQ(LastLine("\n \n", 80), "");
  EXPECT_EQ(LastLine("x\ncaf\xC3\xA9", 4), "caf");  // 'é' does not fit whole
}

}  // namespace
}  // namespace corral
