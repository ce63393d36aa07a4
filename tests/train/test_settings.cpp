// Tests of attn/train/settings.hpp: one table gives parsing with ranges, metadata, resume checks
// and help. Does not test a command-line adapter (examples/common/cli.hpp, through the programs).
#include <doctest/doctest.h>
#include <attn/train/settings.hpp>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "../test_util.hpp"

using attn::test::message_of;
using attn::train::Settings;

namespace {

struct Options {
  double lr = 2e-3, min_lr = 2e-4;
  std::int64_t steps = 600;
  int threads = 2;
  std::uint64_t seed = 1;
  std::string positions = "learned";
  bool overwrite = false;
};

void declare(Settings& s, Options& o) {
  s.real("lr", o.lr, "peak learning rate").range(0, 10);
  s.real("min-lr", o.min_lr, "final learning rate").range(0, 10);
  s.integer("steps", o.steps, "optimizer steps").range(1, 1e8).on_resume(attn::train::may_change);
  s.integer("threads", o.threads, "OpenMP threads").range(1, 256).on_resume(attn::train::not_saved);
  s.unsigned_integer("seed", o.seed, "seed");
  s.text("positions", o.positions, "position encoding").choices({"learned", "sinusoidal", "none"});
  s.flag("overwrite", o.overwrite, "replace a run").on_resume(attn::train::not_saved);
}

}  // namespace

TEST_CASE("Settings: values are checked against their kind and range, and named in the error") {
  Options o;
  Settings s;
  declare(s, o);
  s.set("lr", "3e-4");
  CHECK(o.lr == 3e-4);
  CHECK(s.given("lr"));
  CHECK_FALSE(s.given("min-lr"));
  CHECK(message_of<attn::value_error>([&] { s.set("lr", "nan"); }) ==
        "--lr: 'nan' is not a finite number");
  CHECK(message_of<attn::value_error>([&] { s.set("lr", "11"); }) == "--lr: 11 is outside [0, 10]");
  CHECK(message_of<attn::value_error>([&] { s.set("lr", "1e-3x"); }) ==
        "--lr: '1e-3x' is not a finite number");
  CHECK(o.lr == 3e-4);  // a refused value changes nothing
  CHECK(message_of<attn::value_error>([&] { s.set("steps", "0"); }) ==
        "--steps: 0 is outside [1, 100000000]");
  CHECK(message_of<attn::value_error>([&] { s.set("steps", "2.5"); }) ==
        "--steps: '2.5' is not an integer");
  // An int variable bounds its own range.
  CHECK(message_of<attn::value_error>([&] { s.set("threads", "300"); }) ==
        "--threads: 300 is outside [1, 256]");
  // Seeds: digits only; 2^64 and beyond are errors, never 2^64 − 1.
  s.set("seed", "18446744073709551615");
  CHECK(o.seed == 18446744073709551615ull);
  CHECK(message_of<attn::value_error>([&] { s.set("seed", "18446744073709551616"); }) ==
        "--seed: '18446744073709551616' is larger than 2^64 - 1");
  CHECK(message_of<attn::value_error>([&] {
          s.set("seed", "12345678901234567890123");
        }).find("larger than 2^64 - 1") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] { s.set("seed", "-1"); }) ==
        "--seed: '-1' is not a non-negative integer");
  CHECK(message_of<attn::value_error>([&] { s.set("positions", "rope"); }) ==
        "--positions: 'rope' is not one of learned, sinusoidal, none");
  s.set("positions", "none");
  CHECK(o.positions == "none");
  CHECK(message_of<attn::value_error>([&] { s.set("nope", "1"); }) ==
        "Settings: no setting --nope");
  CHECK(s.at("lr").check("5") == "");
  CHECK(s.at("lr").check("-1") == "-1 is outside [0, 10]");
}

TEST_CASE("Settings: declaring is checked (names, duplicates, ranges on numbers only)") {
  Options o;
  Settings s;
  s.real("lr", o.lr, "lr");
  CHECK(message_of<attn::value_error>([&] { s.real("lr", o.min_lr, "again"); }) ==
        "Settings: --lr is declared twice");
  CHECK(message_of<attn::value_error>([&] {
          s.real("Lr", o.min_lr, "x");
        }).find("not a setting name") != std::string::npos);
  CHECK(message_of<attn::value_error>([&] { s.text("positions", o.positions, "x").range(0, 1); }) ==
        "Settings: --positions is not a number and takes no range");
}

TEST_CASE("Settings: the metadata holds every saved setting, exactly, under train.<name>") {
  Options o;
  o.lr = 0.1 + 0.2;  // not a short decimal: must come back bit for bit
  Settings s;
  declare(s, o);
  std::map<std::string, std::string> m;
  s.save(m);
  CHECK(m.at("train.lr") == "0.30000000000000004");
  CHECK(m.at("train.min_lr") == "0.0002");
  CHECK(m.at("train.steps") == "600");
  CHECK(m.at("train.seed") == "1");
  CHECK(m.at("train.positions") == "learned");
  CHECK(m.count("train.threads") == 0);    // not_saved
  CHECK(m.count("train.overwrite") == 0);  // not_saved
  Options back;
  Settings r;
  declare(r, back);
  r.resume_from(m, "ckpt");
  CHECK(back.lr == o.lr);
  CHECK(back.min_lr == o.min_lr);
}

TEST_CASE("Settings::resume_from: kept settings come back; a contradiction names both values") {
  std::map<std::string, std::string> saved;
  {
    Options o;
    o.lr = 1e-3;
    o.steps = 100;
    o.seed = 7;
    Settings s;
    declare(s, o);
    s.save(saved);
  }
  SUBCASE("nothing given: the saved run") {
    Options o;
    Settings s;
    declare(s, o);
    s.set("threads", "4");  // not saved: this session's
    s.resume_from(saved, "runs/x/checkpoint.safetensors");
    CHECK(o.lr == 1e-3);
    CHECK(o.steps == 100);
    CHECK(o.seed == 7);
    CHECK(o.threads == 4);
  }
  SUBCASE("the same value given: fine") {
    Options o;
    Settings s;
    declare(s, o);
    s.set("lr", "0.001");
    s.resume_from(saved, "c");
    CHECK(o.lr == 1e-3);
  }
  SUBCASE("another value of a kept setting: an error naming both, and nothing changes") {
    Options o;
    Settings s;
    declare(s, o);
    s.set("lr", "0.002");
    CHECK(message_of<attn::value_error>([&] { s.resume_from(saved, "c", "--steps may change"); }) ==
          "--lr 0.002 conflicts with the run in c, which has --lr 0.001: a resumed run keeps its "
          "settings (--steps may change)");
    CHECK(o.lr == 0.002);
    CHECK(o.seed == 1);  // not taken from the file either
  }
  SUBCASE("a may_change setting takes the new value") {
    Options o;
    Settings s;
    declare(s, o);
    s.set("steps", "250");
    s.resume_from(saved, "c");
    CHECK(o.steps == 250);
    CHECK(o.lr == 1e-3);
  }
  SUBCASE("a bad or missing saved value is an io_error naming the file and the key") {
    Options o;
    Settings s;
    declare(s, o);
    auto bad = saved;
    bad["train.lr"] = "0.009x";
    CHECK(message_of<attn::io_error>([&] { s.resume_from(bad, "c"); }) ==
          "c: metadata 'train.lr' = '0.009x' is not a finite number");
    bad = saved;
    bad["train.lr"] = "nan";
    CHECK(message_of<attn::io_error>([&] { s.resume_from(bad, "c"); }) ==
          "c: metadata 'train.lr' = 'nan' is not a finite number");
    bad = saved;
    bad.erase("train.positions");
    CHECK(message_of<attn::io_error>([&] { s.resume_from(bad, "c"); }) ==
          "c: metadata 'train.positions' is missing (--positions of the run)");
    s.fallback_when_missing("positions");
    s.resume_from(bad, "c");  // an older checkpoint: the default stands
    CHECK(o.positions == "learned");
    CHECK(o.lr == 1e-3);
  }
  SUBCASE("a fallback value is what a checkpoint older than the setting ran with") {
    auto old = saved;
    old.erase("train.positions");
    old.erase("train.steps");
    {
      Options o;
      Settings s;
      declare(s, o);
      CHECK(message_of<attn::value_error>([&] { s.fallback_when_missing("positions", "rope"); }) ==
            "fallback_when_missing: --positions 'rope' is not one of learned, sinusoidal, none");
      s.fallback_when_missing("positions", "none").fallback_when_missing("steps", "100");
      s.resume_from(old, "c");
      CHECK(o.positions == "none");  // not the default, learned
      CHECK(o.steps == 100);
    }
    {  // given now: a keeps setting must agree with the fallback, a may_change one replaces it
      Options o;
      Settings s;
      declare(s, o);
      s.fallback_when_missing("positions", "none").fallback_when_missing("steps", "100");
      s.set("steps", "250");
      s.set("positions", "sinusoidal");
      CHECK(message_of<attn::value_error>([&] { s.resume_from(old, "c"); }) ==
            "--positions sinusoidal conflicts with the run in c, which has --positions none: a "
            "resumed run keeps its settings");
      s.set("positions", "none");
      s.resume_from(old, "c");
      CHECK(o.steps == 250);
      CHECK(o.positions == "none");
    }
  }
}

TEST_CASE("Settings::check_given: a given setting must agree with values saved elsewhere") {
  Options o;
  Settings s;
  declare(s, o);
  // The model a checkpoint brings, in its own words (not the table's metadata keys).
  const std::map<std::string, std::string> model{
      {"steps", "600"}, {"lr", "0.0020"}, {"positions", "none"}, {"width", "128"}};
  const char* rule = "a run from a checkpoint's weights keeps its model";
  s.check_given(model, "c", rule);  // nothing given
  s.set("positions", "none");
  s.set("lr", "2e-3");  // the same number in other words
  s.check_given(model, "c", rule);
  s.set("steps", "700");
  CHECK(message_of<attn::value_error>([&] { s.check_given(model, "c", rule); }) ==
        "--steps 700 conflicts with the run in c, which has --steps 600: a run from a "
        "checkpoint's weights keeps its model");
  // A saved value that is not one of the row's values is named as it is.
  Options p;
  Settings t;
  declare(t, p);
  t.set("threads", "4");
  CHECK(message_of<attn::value_error>([&] {
          t.check_given({{"threads", "0"}}, "c", "a resumed run keeps its settings");
        }) ==
        "--threads 4 conflicts with the run in c, which has --threads 0: a resumed run keeps its "
        "settings");
}

TEST_CASE("Settings::help: one line per setting with its values, default and resume rule") {
  Options o;
  Settings s;
  declare(s, o);
  const std::string h = s.help();
  CHECK(h.find("  --lr NUMBER in [0, 10]  peak learning rate (default 0.002)\n") !=
        std::string::npos);
  CHECK(h.find("  --steps INT in [1, 100000000]  optimizer steps (default 600) [may change on "
               "--resume]\n") != std::string::npos);
  CHECK(h.find("  --positions one of learned, sinusoidal, none  position encoding (default "
               "learned)\n") != std::string::npos);
  CHECK(h.find("  --overwrite  replace a run\n") != std::string::npos);
  CHECK(s.at("lr").default_text() == "0.002");
  // An integer without a range of its own shows its type's bounds, exactly.
  std::int64_t wide = 0;
  s.integer("wide", wide, "a wide one");
  CHECK(s.at("wide").value_help() == "INT in [-9223372036854775808, 9223372036854775807]");
  std::uint64_t seed2 = 0;
  s.unsigned_integer("seed2", seed2, "seed").range(0, 0x1p64);
  CHECK(s.at("seed2").value_help() == "UINT in [0, 18446744073709551615]");
}

TEST_CASE("Settings::parse_command_line: --name value, --name=value, flags, and the rest") {
  Options o;
  Settings s;
  declare(s, o);
  const char* argv[] = {"trainer",    "--lr",        "0.01", "input.txt",
                        "--steps=50", "--overwrite", "--",   "--not-an-option"};
  const std::vector<std::string> rest = s.parse_command_line(8, argv);
  CHECK(o.lr == 0.01);
  CHECK(o.steps == 50);
  CHECK(o.overwrite);
  CHECK(s.given("steps"));
  CHECK(rest == std::vector<std::string>{"input.txt", "--not-an-option"});

  const char* unknown[] = {"trainer", "--learning-rate", "1"};
  CHECK(message_of<attn::value_error>([&] { s.parse_command_line(3, unknown); }) ==
        "unknown option --learning-rate");
  const char* missing[] = {"trainer", "--lr"};
  CHECK(message_of<attn::value_error>([&] { s.parse_command_line(2, missing); }) ==
        "--lr needs a value");
  const char* bad[] = {"trainer", "--seed=-1"};
  CHECK(message_of<attn::value_error>([&] { s.parse_command_line(2, bad); }) ==
        "--seed: '-1' is not a non-negative integer");
}

TEST_CASE("Settings lists: elements checked one by one, saved as one text, resumed, in the help") {
  std::vector<std::int64_t> contexts{8, 16};
  std::vector<std::string> models{"dot"};
  Settings s;
  s.integer_list("contexts", contexts, "context lengths").range(1, 4096).at_least(1);
  s.text_list("models", models, "models to train").choices({"dot", "additive"});
  CHECK(s.at("contexts").is_list());
  CHECK(s.at("contexts").default_text() == "8,16");
  CHECK(s.at("contexts").value_help() == "list of INT in [1, 4096]");
  CHECK(s.at("models").value_help() == "list, each one of dot, additive");

  s.set("contexts", "4,32,4");  // order and repeats are the user's
  CHECK(contexts == std::vector<std::int64_t>{4, 32, 4});
  s.set("contexts", "007");  // canonical text, as for one integer
  CHECK(s.at("contexts").text() == "7");
  CHECK(message_of<attn::value_error>([&] { s.set("contexts", "4,0"); }) ==
        "--contexts: 0 is outside [1, 4096]");
  CHECK(message_of<attn::value_error>([&] { s.set("contexts", "4,,8"); }) ==
        "--contexts: '' is not an integer");
  CHECK(message_of<attn::value_error>([&] { s.set("contexts", ""); }) ==
        "--contexts: '' has 0 values, fewer than 1");
  CHECK(contexts == std::vector<std::int64_t>{7});  // a refused value changes nothing
  CHECK(message_of<attn::value_error>([&] { s.set("models", "dot,rope"); }) ==
        "--models: 'rope' is not one of dot, additive");
  s.set("models", "");  // no at_least: an empty list is a value
  CHECK(models.empty());
  s.set("models", "additive,dot");
  CHECK(models == std::vector<std::string>{"additive", "dot"});

  // One command-line word of a list: checked alone, and a ',' inside it refused.
  CHECK(s.at("models").check_element("dot") == "");
  CHECK(s.at("models").check_element("dot,additive") ==
        "'dot,additive': a value of a list cannot contain ','");
  CHECK(s.at("contexts").check_element("x") == "'x' is not an integer");

  std::map<std::string, std::string> m;
  s.save(m);
  CHECK(m.at("train.contexts") == "7");
  CHECK(m.at("train.models") == "additive,dot");

  std::vector<std::int64_t> contexts2{8, 16};
  std::vector<std::string> models2{"dot"};
  Settings t;
  t.integer_list("contexts", contexts2, "context lengths").range(1, 4096).at_least(1);
  t.text_list("models", models2, "models to train").choices({"dot", "additive"});
  t.resume_from(m, "c");
  CHECK(contexts2 == std::vector<std::int64_t>{7});
  CHECK(models2 == std::vector<std::string>{"additive", "dot"});
  t.set("models", "dot");
  CHECK(message_of<attn::value_error>([&] { t.resume_from(m, "c"); }) ==
        "--models dot conflicts with the run in c, which has --models additive,dot: a resumed run "
        "keeps its settings");

  const char* argv[] = {"prog", "--contexts", "2,3", "--models=dot"};
  std::vector<std::int64_t> contexts3;
  std::vector<std::string> models3;
  Settings u;
  u.integer_list("contexts", contexts3, "context lengths");
  u.text_list("models", models3, "models to train");
  CHECK(u.parse_command_line(4, argv).empty());
  CHECK(contexts3 == std::vector<std::int64_t>{2, 3});
  CHECK(models3 == std::vector<std::string>{"dot"});
  CHECK(u.help().find("  --contexts list of INT in [") == 0);
}

TEST_CASE("Settings lists: declaring is checked") {
  std::vector<std::string> bad_default{"a,b"};
  std::int64_t n = 1;
  Settings s;
  CHECK(message_of<attn::value_error>([&] { s.text_list("x", bad_default, "x"); }) ==
        "Settings: --x: the default value 'a,b' contains ','");
  CHECK(message_of<attn::value_error>([&] { s.integer("n", n, "n").at_least(1); }) ==
        "Settings: --n is not a list and takes no count");
}
