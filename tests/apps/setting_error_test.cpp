// Errors about settings name them as {name}: what() shows the names, a front end its own
// spelling, and a user's word that holds braces is never read as a setting.
#include <boost/test/unit_test.hpp>
#include <string>

#include "apps/cli/cli.h"
#include "core/setting_error.h"

using namespace alloy;

BOOST_AUTO_TEST_SUITE(setting_error)

namespace {

std::string as_flag(const std::string& name) {
  return "--" + name;
}

}  // namespace

BOOST_AUTO_TEST_CASE(names_render_as_names_or_as_each_front_end_spells_them) {
  const std::string text = "{batch_size} 100 does not split into 3 ({accumulation_steps})";
  BOOST_TEST(render_settings(text, as_flag) ==
             "--batch_size 100 does not split into 3 (--accumulation_steps)");
  try {
    setting_fail("{batch_size} ", 100, " does not split into ", 3, " micro-batches");
    BOOST_FAIL("setting_fail returned");
  } catch (const UsageError& error) {
    BOOST_TEST(std::string(error.what()) == "batch_size 100 does not split into 3 micro-batches");
    BOOST_TEST(app::command_message(error) ==
               "--batch-size 100 does not split into 3 micro-batches");
  }
}

BOOST_AUTO_TEST_CASE(a_failure_keeps_exit_status_one_and_renders_alike) {
  try {
    setting_failure("{device} cuda:3: this machine has 1 CUDA device");
    BOOST_FAIL("setting_failure returned");
  } catch (const UsageError&) {
    BOOST_FAIL("a SettingFailure is not a usage error");
  } catch (const Error& error) {
    BOOST_TEST(std::string(error.what()) == "device cuda:3: this machine has 1 CUDA device");
    BOOST_TEST(app::command_message(error) == "--device cuda:3: this machine has 1 CUDA device");
  }
}

BOOST_AUTO_TEST_CASE(a_users_word_with_braces_stays_as_written) {
  const std::string word = "{batch_size}";
  try {
    setting_fail("{normalize} '", word, "' is not one of auto, none or imagenet");
    BOOST_FAIL("setting_fail returned");
  } catch (const UsageError& error) {
    BOOST_TEST(std::string(error.what()) ==
               "normalize '{batch_size}' is not one of auto, none or imagenet");
    BOOST_TEST(app::command_message(error) ==
               "--normalize '{batch_size}' is not one of auto, none or imagenet");
  }
}

BOOST_AUTO_TEST_CASE(text_that_is_not_a_name_is_left_alone) {
  BOOST_TEST(render_settings("{{literal}} {Not_A_Name} {} {open", as_flag) ==
             "{literal}} {Not_A_Name} {} {open");
  BOOST_TEST(render_settings("plain", as_flag) == "plain");
}

BOOST_AUTO_TEST_CASE(other_errors_show_their_message) {
  const Error plain("--flag as written");
  BOOST_TEST(app::command_message(plain) == "--flag as written");
}

BOOST_AUTO_TEST_CASE(flags_and_settings_map_both_ways) {
  BOOST_TEST(app::flag_of_setting("max_loss_scale") == "--max-loss-scale");
  BOOST_TEST(app::setting_of_flag("max-loss-scale") == "max_loss_scale");
  BOOST_TEST(app::setting_of_flag("nproc-per-node") == "gpus");
}

BOOST_AUTO_TEST_SUITE_END()
