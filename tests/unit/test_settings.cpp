// The environment settings: one parser per kind of value, errors that name the variable, the
// value and what it accepts, the public table and the copy of it in docs/building.md.
#include "common/environment.hpp"
#include "scoped_env.hpp"

#include <halox/error.hpp>
#include <halox/info.hpp>
#include <halox/settings.hpp>

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <functional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

namespace {

namespace settings = halox::detail::settings;

using halox_test::scoped_env;

std::string rejection(std::function<void()> const& read) {
  try {
    read();
  } catch (halox::error const& e) {
    EXPECT_EQ(e.code(), halox::errc::invalid_argument) << e.what();
    return e.message();
  }
  ADD_FAILURE() << "the value was accepted";
  return {};
}

TEST(Settings, UnsetAndEmptyMeanNothing) {
  for (char const* v : {static_cast<char const*>(nullptr), ""}) {
    scoped_env const a("HALOX_TIMEOUT", v), b("HALOX_CHECK", v), c("HALOX_FAKE_NODES", v),
        d("HALOX_PLAN_CACHE", v), e("HALOX_TUNE_RECHECK", v);
    EXPECT_FALSE(settings::timeout_seconds());
    EXPECT_FALSE(settings::check_execute());
    EXPECT_FALSE(settings::fake_nodes(4));
    EXPECT_FALSE(settings::plan_cache());
    EXPECT_FALSE(settings::tune_recheck());
  }
}

TEST(Settings, Switches) {
  for (auto [text, on] : {std::pair{"1", true}, {"on", true}, {"0", false}, {"off", false}}) {
    scoped_env const e("HALOX_CHECK", text);
    ASSERT_TRUE(settings::check_execute()) << text;
    EXPECT_EQ(*settings::check_execute(), on) << text;
  }
  scoped_env const e("HALOX_VERBOSE", "yes");
  EXPECT_EQ(rejection([] { (void)settings::verbose(); }),
            "HALOX_VERBOSE=\"yes\" is not 0, 1, off or on; set e.g. HALOX_VERBOSE=1, or unset it "
            "(unset: off)");
}

TEST(Settings, Seconds) {
  {
    scoped_env const e("HALOX_TIMEOUT", "2.5");
    EXPECT_DOUBLE_EQ(settings::timeout_seconds().value(), 2.5);
  }
  for (char const* bad : {"soon", "-1", "3s", "inf", "nan", "1e12"}) {
    scoped_env const e("HALOX_TIMEOUT", bad);
    std::string const why = rejection([] { (void)settings::timeout_seconds(); });
    EXPECT_NE(why.find(std::string("HALOX_TIMEOUT=\"") + bad +
                       "\" is not a number of seconds >= 0 (0: no bound); set e.g. "
                       "HALOX_TIMEOUT=30, or unset it (unset: 300 s"),
              std::string::npos)
        << why;
  }
}

TEST(Settings, Bytes) {
  {
    scoped_env const e("HALOX_PIPELINE_FRAGMENT", "65536");
    EXPECT_EQ(settings::pipeline_fragment_bytes().value(), 65536u);
  }
  for (char const* bad : {"64k", "-5", "1099511627776", " 12"}) {
    scoped_env const e("HALOX_PIPELINE_FRAGMENT", bad);
    EXPECT_NE(
        rejection([] {
          (void)settings::pipeline_fragment_bytes();
        }).find(std::string("HALOX_PIPELINE_FRAGMENT=\"") + bad + "\" is not a number of bytes"),
        std::string::npos)
        << bad;
  }
}

TEST(Settings, WholeNumbersInTheCallersRange) {
  {
    scoped_env const e("HALOX_FAKE_NODES", "3");
    EXPECT_EQ(settings::fake_nodes(4).value(), 3);
    EXPECT_EQ(rejection([] { (void)settings::fake_nodes(2); }),
              "HALOX_FAKE_NODES=\"3\" is not a whole number in [1, 2]; set e.g. "
              "HALOX_FAKE_NODES=2, or unset it (unset: the real nodes)");
  }
  scoped_env const e("HALOX_TUNE_MAX_ROUNDS", "4");
  EXPECT_EQ(settings::tune_max_rounds(4).value(), 4);
  EXPECT_NE(rejection([] { (void)settings::tune_max_rounds(5); })
                .find("HALOX_TUNE_MAX_ROUNDS=\"4\" is not a whole number in [5 "
                      "(tune_options::trials), 100000]"),
            std::string::npos);
}

TEST(Settings, Words) {
  using r = settings::recheck;
  for (auto [text, mode] : {std::pair{"off", r::off},
                            {"0", r::off},
                            {"on", r::on},
                            {"1", r::on},
                            {"always", r::always},
                            {"switch", r::force_switch}}) {
    scoped_env const e("HALOX_TUNE_RECHECK", text);
    EXPECT_EQ(settings::tune_recheck().value(), mode) << text;
  }
  scoped_env const e("HALOX_TUNE_RECHECK", "sometimes");
  EXPECT_NE(rejection([] { (void)settings::tune_recheck(); })
                .find("HALOX_TUNE_RECHECK=\"sometimes\" is not one of off, on, always, switch, 0 "
                      "or 1; set e.g. HALOX_TUNE_RECHECK=on"),
            std::string::npos);
}

TEST(Settings, OnednnLayout) {
  for (char const* text : {"blocked", "plain", "channels_last"}) {
    scoped_env const e("HALOX_ONEDNN_LAYOUT", text);
    EXPECT_EQ(settings::onednn_layout().value(), text);
  }
  for (char const* text : {"measure", static_cast<char const*>(nullptr)}) {
    scoped_env const e("HALOX_ONEDNN_LAYOUT", text);
    EXPECT_FALSE(settings::onednn_layout().has_value()) << (text ? text : "unset");
  }
  scoped_env const e("HALOX_ONEDNN_LAYOUT", "nhwc");
  EXPECT_NE(rejection([] { (void)settings::onednn_layout(); })
                .find("HALOX_ONEDNN_LAYOUT=\"nhwc\" is not one of measure, blocked, plain or "
                      "channels_last; set e.g. HALOX_ONEDNN_LAYOUT=blocked"),
            std::string::npos);
}

TEST(Settings, TableHasEveryVariableOnce) {
  auto const& all = halox::environment_settings();
  std::set<std::string> names;
  for (auto const& s : all) {
    EXPECT_EQ(s.name.rfind("HALOX_", 0), 0u) << s.name;
    EXPECT_FALSE(s.accepts.empty() || s.unset.empty() || s.option.empty() || s.meaning.empty())
        << s.name;
    EXPECT_TRUE(names.insert(s.name).second) << s.name << " twice";
  }
  EXPECT_EQ(names.size(), 19u);
  EXPECT_TRUE(names.count("HALOX_TIMEOUT") && names.count("HALOX_BACKEND") &&
              names.count("HALOX_OPS_PLAN_CACHE"));
}

TEST(Settings, DescribeEnvironmentReportsWithoutThrowing) {
  scoped_env const a("HALOX_TIMEOUT", "12"), b("HALOX_CHECK", "maybe"),
      c("HALOX_BACKEND", "warp_drive"), d("HALOX_VERBOSE", nullptr);
  std::string const d_text = halox::describe_environment();
  EXPECT_NE(d_text.find("HALOX_TIMEOUT=12\n"), std::string::npos) << d_text;
  EXPECT_NE(d_text.find("HALOX_CHECK=maybe (rejected: HALOX_CHECK=\"maybe\" is not 0, 1, off or "
                        "on"),
            std::string::npos)
      << d_text;
  EXPECT_NE(d_text.find("HALOX_BACKEND=warp_drive (rejected: unknown backend 'warp_drive'"),
            std::string::npos)
      << d_text;
  EXPECT_EQ(d_text.find("HALOX_VERBOSE"), std::string::npos) << d_text;
  EXPECT_NE(halox::build_info().find("  environment:\n    HALOX_TIMEOUT=12\n"), std::string::npos)
      << halox::build_info();
}

// The table of environment variables in docs/building.md names exactly the variables halox
// reads, each with what it accepts.
TEST(Settings, DocsTableMatches) {
  std::ifstream in(std::string(HALOX_SOURCE_DIR) + "/docs/building.md");
  ASSERT_TRUE(in) << "docs/building.md not found under " << HALOX_SOURCE_DIR;
  std::stringstream text;
  text << in.rdbuf();
  std::string const page = text.str();
  auto const at = page.find("\n## Environment variables");
  ASSERT_NE(at, std::string::npos) << "docs/building.md has no '## Environment variables' section";
  std::string const section = page.substr(at, page.find("\n#", at + 1) - at);
  std::set<std::string> rows;
  std::regex const row(R"(\n\| `(HALOX_[A-Z0-9_]+)` \|)");
  for (std::sregex_iterator it(section.begin(), section.end(), row), end; it != end; ++it)
    rows.insert((*it)[1]);
  std::set<std::string> names;
  for (auto const& s : halox::environment_settings()) {
    names.insert(s.name);
    auto const line = section.find("\n| `" + s.name + "` | ");
    if (line == std::string::npos) continue;
    std::string const row_text = section.substr(line + 1, section.find('\n', line + 1) - line - 1);
    EXPECT_NE(row_text.find(s.accepts), std::string::npos)
        << s.name << ": the docs/building.md row does not say it accepts " << s.accepts << "\n"
        << row_text;
  }
  EXPECT_EQ(rows, names) << "docs/building.md's environment table and "
                            "halox::environment_settings() list different variables";
}

} // namespace
