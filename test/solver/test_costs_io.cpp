// Costs files: round trip and every kind of bad file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>

#include "solver/costs.h"
#include "solver/memory_limit.h"
#include "solver/testing/builtin_chains.h"

using namespace jitckpt::solver;

namespace {
void expectError(const std::string& json, const std::string& words) {
  try {
    costsFromJson(json);
    ADD_FAILURE() << "accepted " << json;
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
  }
}
const char* kGood =
    R"({"uf":[0,1,2],"ub":[0,2,4],"wa":[5,6,7],"wabar":[0,8,9],"wd":[5,6,7],"of":[0,1,1],"ob":[0,1,1]})";
}  // namespace

TEST(ChainFile, RoundTrip) {
  const Costs chain = resnet1001Costs();
  EXPECT_EQ(chain.length(), 339);
  const std::string path = testing::TempDir() + "/chain.json";
  writeCostsFile(chain, path);
  const Costs back = readCostsFile(path);
  EXPECT_EQ(back.uf, chain.uf);
  EXPECT_EQ(back.wa, chain.wa);
  EXPECT_EQ(back.wabar, chain.wabar);
  EXPECT_EQ(back.ob, chain.ob);
  EXPECT_EQ(costsFromJson(kGood).length(), 2);
}

TEST(ChainFile, NoGradForwardTimesRoundTripAndDefaultToUf) {
  const Costs chain = randomCosts(5, 11, 50, 20);
  ASSERT_EQ(chain.uf_nograd.size(), chain.uf.size());
  const Costs back = costsFromJson(costsToJson(chain));
  EXPECT_EQ(back.uf_nograd, chain.uf_nograd);
  EXPECT_DOUBLE_EQ(back.noGradForward(3), chain.uf_nograd[3]);
  const Costs without = costsFromJson(kGood);  // no "uf_nograd": Fck and F∅ take uf
  EXPECT_TRUE(without.uf_nograd.empty());
  EXPECT_DOUBLE_EQ(without.noGradForward(1), without.uf[1]);
  Costs short_field = chain;
  short_field.uf_nograd.pop_back();
  EXPECT_THROW(validate(short_field), std::invalid_argument);
}

TEST(ChainFile, NoGradForwardOverheadsRoundTripAndDefaultToOf) {
  const Costs chain = randomCosts(8, 11, 50, 20);
  ASSERT_EQ(chain.of_nograd.size(), chain.of.size());
  ASSERT_NE(chain.of_nograd, chain.of) << "the random chain should draw them apart";
  const Costs back = costsFromJson(costsToJson(chain));
  EXPECT_EQ(back.of_nograd, chain.of_nograd);
  EXPECT_EQ(back.noGradForwardOverhead(3), chain.of_nograd[3]);
  const Costs without = costsFromJson(kGood);  // no "of_nograd": Fck and F∅ take of
  EXPECT_TRUE(without.of_nograd.empty());
  EXPECT_EQ(without.noGradForwardOverhead(1), without.of[1]);
  Costs short_field = chain;
  short_field.of_nograd.pop_back();
  EXPECT_THROW(validate(short_field), std::invalid_argument);
  expectError(R"({"uf":[0,1],"ub":[0,2],"wa":[5,6],"wabar":[0,8],"wd":[5,6],"of":[0,1],"ob":[0,1],)"
              R"("of_nograd":[0,-1]})",
              "'of_nograd' at stage 1");
}

TEST(ChainFile, HeldOutputRoundTripsAndDefaultsToNone) {
  Costs chain = randomCosts(5, 11, 50, 20);
  chain.held_output = 1234;
  EXPECT_EQ(costsFromJson(costsToJson(chain)).held_output, 1234);
  EXPECT_EQ(costsFromJson(kGood).held_output, 0);
  chain.held_output = -1;
  EXPECT_THROW(validate(chain), std::invalid_argument);
  expectError(R"({"uf":[0,1],"ub":[0,2],"wa":[5,6],"wabar":[0,8],"wd":[5,6],"of":[0,1],"ob":[0,1],)"
              R"("held_output":3})",
              "at least two stages");
  expectError(std::string(R"({"uf":[0,1,1],"ub":[0,2,2],"wa":[5,6,6],"wabar":[0,8,8],)") +
                  R"("wd":[5,6,6],"of":[0,1,1],"ob":[0,1,1],"held_output":"many"})",
              "must be an integer");
}

TEST(ChainFile, StagesThatRunOnceRoundTripAndDefaultToNone) {
  Costs chain = randomCosts(5, 11, 50, 20);
  chain.runs_once = {2, 4};
  const Costs read = costsFromJson(costsToJson(chain));
  EXPECT_EQ(read.runs_once, chain.runs_once);
  EXPECT_TRUE(read.runsOnce(4));
  EXPECT_FALSE(read.runsOnce(3));
  EXPECT_TRUE(costsFromJson(kGood).runs_once.empty());
  for (const std::vector<int>& bad : {std::vector<int>{0}, {6}, {3, 2}, {2, 2}}) {
    chain.runs_once = bad;
    EXPECT_THROW(validate(chain), std::invalid_argument);
  }
  expectError(std::string(R"({"uf":[0,1,1],"ub":[0,2,2],"wa":[5,6,6],"wabar":[0,8,8],)") +
                  R"("wd":[5,6,6],"of":[0,1,1],"ob":[0,1,1],"runs_once":[3]})",
              "'runs_once' entry 0 is 3");
}

TEST(ChainFile, ParameterGradientsRoundTripAndDefaultToNone) {
  const Costs chain = randomCosts(5, 11, 50, 20);
  ASSERT_EQ(chain.wg.size(), chain.uf.size());
  EXPECT_EQ(costsFromJson(costsToJson(chain)).wg, chain.wg);
  const Costs without = costsFromJson(kGood);  // no "wg": gradients are not counted
  EXPECT_TRUE(without.wg.empty());
  EXPECT_EQ(without.gradientBytes(1), 0);
  Costs negative = chain;
  negative.wg[2] = -1;
  EXPECT_THROW(validate(negative), std::invalid_argument);
}

TEST(ChainFile, HandedGradientsRoundTripAndArePartOfBothDeltas) {
  const Costs chain = randomCosts(8, 11, 50, 20);
  ASSERT_EQ(chain.wd_handed.size(), chain.uf.size());
  EXPECT_EQ(costsFromJson(costsToJson(chain)).wd_handed, chain.wd_handed);
  const Costs without = costsFromJson(kGood);  // none handed on: B(l) makes all of delta^{l-1}
  EXPECT_TRUE(without.wd_handed.empty());
  EXPECT_EQ(without.backwardAddedBytes(1), without.wd[0] + without.ob[1]);
  Costs over = chain;
  over.wd_handed[3] = std::min(over.wd[3], over.wd[2]) + 1;
  EXPECT_THROW(validate(over), std::invalid_argument);
  Costs first = chain;
  first.wd_handed[0] = 1;  // nothing comes before delta^0
  EXPECT_THROW(validate(first), std::invalid_argument);
}

TEST(ChainFile, SpansRoundTripAndAreBoundedByEveryActivationTheyCover) {
  const Costs chain = withLongSpans(randomCosts(6, 11, 50, 20), 11);
  ASSERT_FALSE(chain.spans.empty());
  EXPECT_EQ(costsFromJson(costsToJson(chain)).spans, chain.spans);
  const Costs without = costsFromJson(kGood);  // no "spans": nothing is shared
  EXPECT_TRUE(without.spans.empty());
  EXPECT_EQ(without.abarOwnBytes(1), without.wabar[1]);
  // a^0 is 1 byte, a^1 2 and a^2 3: a span over all three holds at most 1 byte of each.
  const char* base =
      R"({"uf":[0,1,1],"ub":[0,1,1],"wa":[1,2,3],"wabar":[0,3,3],"wd":[1,2,3],"of":[0,0,0],)"
      R"("ob":[0,0,0],)";
  const Costs spanned = costsFromJson(std::string(base) + R"("spans":[[0,2,1],[1,2,1]]})");
  EXPECT_EQ(spanned.sharedBytes(0, 2), 1);
  EXPECT_EQ(spanned.sharedBytes(0, 1), 1);
  EXPECT_EQ(spanned.passedBytes(2), 2);
  EXPECT_EQ(spanned.abarOwnBytes(1), 2);
  EXPECT_EQ(spanned.abarOwnBytes(2), 1);
  expectError(std::string(base) + R"("spans":[[0,2,2]]})", "2 bytes of a^0, more than wa[0]");
  expectError(std::string(base) + R"("spans":[[1,1,1]]})", "entry 0 is [1, 1, 1]");
  expectError(std::string(base) + R"("spans":[[0,3,1]]})", "entry 0 is [0, 3, 1]");
  expectError(std::string(base) + R"("spans":[[0,1]]})", "entry 0 is [0,1]");
  expectError(std::string(base) + R"("spans":[],"wpass":[0,0,0]})", "give one");
  // The older form: wpass[l], what a^l holds of a^{l-1}. a^1 (2 bytes) holds 1 of a^0 and
  // passes 2 on to a^2: 1 byte is in all three, the other is a^1's own.
  const Costs passed = costsFromJson(std::string(base) + R"("wpass":[0,1,2]})");
  EXPECT_EQ(passed.spans, (std::vector<Span>{{0, 2, 1}, {1, 2, 1}}));
  EXPECT_EQ(passed.passedBytes(1), 1);
  EXPECT_EQ(passed.passedBytes(2), 2);
  const Costs apart = costsFromJson(std::string(base) + R"("wpass":[0,1,1]})");
  EXPECT_EQ(apart.spans, (std::vector<Span>{{0, 1, 1}, {1, 2, 1}}));
  EXPECT_EQ(apart.sharedBytes(0, 2), 0);
  expectError(std::string(base) + R"("wpass":[0,2,0]})", "'wpass' at stage 1");
  expectError(std::string(base) + R"("wpass":[1,0,0]})", "'wpass' at stage 0");
}

TEST(ChainFile, BadFilesNameFieldAndStage) {
  expectError(R"({"uf":[0],"ub":[0],"wa":[1],"wabar":[0],"wd":[1],"of":[0],"ob":[0]})", "empty");
  expectError(R"({"uf":[0,1],"ub":[0,1],"wa":[1,2],"wabar":[0,2],"wd":[1,2],"of":[0,0]})", "'ob'");
  expectError(
      R"({"uf":[0,1],"ub":[0,1],"wa":[1,-2],"wabar":[0,2],"wd":[1,2],"of":[0,0],"ob":[0,0]})",
      "'wa' at stage 1");
  expectError(
      R"({"uf":[0,1],"ub":[0,1],"wa":[1,"x"],"wabar":[0,2],"wd":[1,2],"of":[0,0],"ob":[0,0]})",
      "'wa' at stage 1");
  expectError(
      R"({"uf":[0,1,2],"ub":[0,1],"wa":[1,2,3],"wabar":[0,2,3],"wd":[1,2,3],"of":[0,0,0],"ob":[0,0,0]})",
      "'ub' has 2 entries");
  expectError(
      R"({"uf":[0,1],"ub":[0,1],"wa":[1,5],"wabar":[0,2],"wd":[1,2],"of":[0,0],"ob":[0,0]})",
      "'wabar' at stage 1");
  expectError(
      R"({"uf":[0,1],"ub":[0,1],"wa":[1,2.5],"wabar":[0,3],"wd":[1,2],"of":[0,0],"ob":[0,0]})",
      "'wa' at stage 1");
  expectError(
      R"({"uf":[0,1],"ub":[0,"slow"],"wa":[1,2],"wabar":[0,3],"wd":[1,2],"of":[0,0],"ob":[0,0]})",
      "'ub' at stage 1");
  expectError("[1,2]", "JSON object");
  expectError("{not json", "not valid JSON");
  EXPECT_THROW(readCostsFile("/nonexistent/chain.json"), std::invalid_argument);
}

TEST(MemoryLimit, ParsesBytesFractionsAndErrors) {
  EXPECT_EQ(MemoryLimit::parse("2GiB").resolve(0), int64_t{2} << 30);
  EXPECT_EQ(MemoryLimit::parse("512 MiB").resolve(0), int64_t{512} << 20);
  EXPECT_EQ(MemoryLimit::parse("1.5GB").resolve(0), 1500000000);
  EXPECT_EQ(MemoryLimit::parse("1000000").resolve(0), 1000000);
  EXPECT_EQ(MemoryLimit::parse("0.5").resolve(1000), 500);
  EXPECT_EQ(MemoryLimit::parse("25%").resolve(1000), 250);
  EXPECT_EQ(MemoryLimit::parse("none").kind, MemoryLimit::Kind::Unlimited);
  EXPECT_THROW(MemoryLimit::parse("lots"), std::invalid_argument);
  EXPECT_THROW(MemoryLimit::parse("5 parsecs"), std::invalid_argument);
  EXPECT_THROW(MemoryLimit::parse("-1GiB"), std::invalid_argument);
  EXPECT_THROW(MemoryLimit::parse("150%"), std::invalid_argument);
  EXPECT_EQ(MemoryLimit::parse(" 2 GiB ").resolve(0), int64_t{2} << 30);
  EXPECT_EQ(MemoryLimit::parse("1e6B").resolve(0), 1000000);
  // A number split by spaces, hexadecimal, nan, and bytes that are not whole: refused, not read
  // as 1950, 256, or 0 and 2 bytes.
  for (const char* text : {"1 9 5 0", "0x100", "nan", "0.4B", "1.5B", "0.0001KiB", "2 G iB"})
    EXPECT_THROW(MemoryLimit::parse(text), std::invalid_argument) << text;
  EXPECT_EQ(formatBytes(1536), "1.50 KiB");
}

TEST(MemoryLimit, MinAndAutoParsePrintAndWaitForTheSolveStep) {
  for (const char* text : {"min", "auto", " AUTO "}) {
    const MemoryLimit limit = MemoryLimit::parse(text);
    EXPECT_TRUE(limit.kind == MemoryLimit::Kind::Min || limit.kind == MemoryLimit::Kind::Auto);
    EXPECT_EQ(MemoryLimit::parse(limit.toText()).kind, limit.kind);
    EXPECT_EQ(limit.toString(), limit.toText());
    // Neither is a number of bytes before the solve step knows the chain and the device.
    EXPECT_THROW(limit.resolve(1000), std::logic_error);
  }
  EXPECT_EQ(MemoryLimit::parse("min").toText(), "min");
  EXPECT_EQ(MemoryLimit::parse("auto").toText(), "auto");
  EXPECT_THROW(MemoryLimit::parse("minimum"), std::invalid_argument);
}

TEST(MemoryLimit, RefusesWhatWouldWrapOrRound) {
  // A bare 1.5 is neither a fraction nor whole bytes (it used to be read as 2 bytes).
  EXPECT_THROW(MemoryLimit::parse("1.5"), std::invalid_argument);
  EXPECT_EQ(MemoryLimit::parse("2.0").resolve(0), 2);
  // Bytes that int64 cannot hold (Python's memory_limit=10**30 arrives as "1000...0B").
  EXPECT_THROW(MemoryLimit::parse("1" + std::string(30, '0') + "B"), std::invalid_argument);
  EXPECT_THROW(MemoryLimit::parse("9000000TiB"), std::invalid_argument);
  EXPECT_THROW(MemoryLimit::parse("1e300"), std::invalid_argument);
  EXPECT_EQ(MemoryLimit::parse("1TiB").resolve(0), int64_t{1} << 40);
  EXPECT_EQ(formatBytes(int64_t{3} << 50), "3.00 PiB");
  // toText is exact and parse reads it back.
  for (const char* text : {"123456789B", "0.123456789", "none", "37%"}) {
    const MemoryLimit limit = MemoryLimit::parse(text);
    const MemoryLimit back = MemoryLimit::parse(limit.toText());
    EXPECT_EQ(back.kind, limit.kind) << text;
    EXPECT_EQ(back.value, limit.value) << text;
  }
}
