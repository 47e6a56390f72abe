// The planning options as Python and the command line give them (planner/user_options.h): their
// defaults are CheckpointOptions' own, the result does not depend on the order they come in, and a
// text an option cannot read is refused, naming the option.
#include <gtest/gtest.h>

#include <stdexcept>

#include "planner/user_options.h"

namespace jitckpt {
namespace {

TEST(UserOptions, DefaultsAreCheckpointOptionsOwn) {
  const CheckpointRequest request = defaultRequest();
  const CheckpointOptions plain;
  EXPECT_EQ(request.options.slots, plain.slots);
  EXPECT_EQ(request.options.strategy, plain.strategy);
  EXPECT_EQ(request.options.segments, plain.segments);
  EXPECT_EQ(request.options.max_stages, plain.max_stages);
  EXPECT_EQ(request.options.every_cut, plain.every_cut);
  EXPECT_EQ(request.options.profile_repeats, plain.profile_repeats);
  EXPECT_EQ(request.options.verbose, plain.verbose);
  EXPECT_TRUE(request.options.given.empty());
  EXPECT_EQ(request.limit.toText(), "0.5");
}

TEST(UserOptions, EachTextLandsInItsField) {
  const CheckpointRequest r = makeRequest({{"memory_limit", "2GiB"},
                                           {"strategy", "periodic"},
                                           {"slots", "37"},
                                           {"segments", "3"},
                                           {"max_stages", "9"},
                                           {"cuts", "every"},
                                           {"profile_repeats", "2"},
                                           {"verbose", "true"}});
  EXPECT_EQ(r.limit.toText(), MemoryLimit::parse("2GiB").toText());
  EXPECT_EQ(r.options.strategy, Strategy::Periodic);
  EXPECT_EQ(r.options.slots, 37);
  EXPECT_EQ(r.options.segments, 3);
  EXPECT_EQ(r.options.max_stages, 9);
  EXPECT_TRUE(r.options.every_cut);
  EXPECT_EQ(r.options.profile_repeats, 2);
  EXPECT_TRUE(r.options.verbose);
  EXPECT_EQ(flagOf(userOptions()[0]), "--memory-limit");
}

TEST(UserOptions, AScheduleRunsAsGivenWhateverTheOrder) {
  const std::string schedule = "Fall(1) B(1)";
  EXPECT_EQ(makeRequest({{"schedule", schedule}}).options.strategy, Strategy::Given);
  EXPECT_EQ(makeRequest({{"schedule", schedule}, {"strategy", "optimal"}}).options.strategy,
            Strategy::Given);
  CheckpointRequest request = defaultRequest();
  setUserOption(request, "schedule", schedule);
  EXPECT_THROW(setUserOption(request, "strategy", "revolve"), std::invalid_argument);
  EXPECT_THROW(makeRequest({{"strategy", "revolve"}, {"schedule", schedule}}),
               std::invalid_argument);
}

TEST(UserOptions, TextsAnOptionCannotReadAreRefusedByName) {
  for (const auto& [name, text] :
       std::vector<std::pair<std::string, std::string>>{{"slots", "many"},
                                                        {"slots", "5x"},
                                                        {"strategy", "fastest"},
                                                        {"cuts", "all"},
                                                        {"verbose", "yes"},
                                                        {"memory_limit", "3 parsecs"},
                                                        {"no_such_option", "1"}}) {
    try {
      makeRequest({{name, text}});
      ADD_FAILURE() << name << "=" << text << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("jitckpt: "), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace jitckpt
