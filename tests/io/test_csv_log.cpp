// Tests of attn/io/csv_log.hpp: header handling, number formatting, append rules, errors.
// Does not test concurrent writers to one log (CsvLog does not support them).
#include <doctest/doctest.h>
#include <attn/io/csv_log.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "io_fixture.hpp"

namespace fs = std::filesystem;
using attn::test::message_of;
using attn::test::TempDir;

namespace {
std::string contents(const fs::path& p) {
  return attn::test::to_string(attn::io::read_file(p));
}
}  // namespace

TEST_CASE("CsvLog: header, then one flushed line per row") {
  TempDir dir;
  const fs::path p = dir / "log.csv";
  attn::io::CsvLog log(p, {"step", "loss"});
  CHECK(contents(p) == "step,loss\n");
  log.row({1, 2.5});
  CHECK(contents(p) == "step,loss\n1,2.5\n");  // flushed: visible before the log closes
  const std::vector<double> v = {2, 0.25};
  log.row(v);
  CHECK(contents(p) == "step,loss\n1,2.5\n2,0.25\n");
  CHECK(log.columns() == std::vector<std::string>{"step", "loss"});
  CHECK(log.path() == p);
}

TEST_CASE("CsvLog: numbers have 9 significant digits and round-trip floats") {
  TempDir dir;
  const fs::path p = dir / "num.csv";
  {
    attn::io::CsvLog log(p, {"a", "b", "c", "d", "e", "f", "g"});
    const double inf = std::numeric_limits<double>::infinity();
    log.row({0.1, static_cast<double>(0.1f), 1e-10, 1234567890123.0, -0.0, inf, -inf});
    log.row({std::numeric_limits<double>::quiet_NaN(), 1, 2, 3, 4, 5, 6});
  }
  CHECK(contents(p) ==
        "a,b,c,d,e,f,g\n"
        "0.1,0.100000001,1e-10,1.23456789e+12,-0,inf,-inf\n"
        "nan,1,2,3,4,5,6\n");

  // Any float survives the trip through the text.
  const fs::path q = dir / "floats.csv";
  const std::vector<float> floats = {0.1f,        1.0f / 3.0f, 3.4028235e38f, 1.17549435e-38f,
                                     -7.006e-45f, 123456.789f};
  {
    attn::io::CsvLog log(q, {"x"});
    for (const float f : floats) log.row({static_cast<double>(f)});
  }
  const std::string text = contents(q);
  std::size_t pos = text.find('\n') + 1;
  for (const float f : floats) {
    const std::size_t end = text.find('\n', pos);
    const std::string field = text.substr(pos, end - pos);
    CHECK(std::strtof(field.c_str(), nullptr) == f);
    pos = end + 1;
  }
}

TEST_CASE("CsvLog: append continues a log with the same header and refuses another header") {
  TempDir dir;
  const fs::path p = dir / "log.csv";
  {
    attn::io::CsvLog log(p, {"step", "loss"}, /*append=*/true);  // new file: header written
    log.row({1, 0.5});
  }
  {
    attn::io::CsvLog log(p, {"step", "loss"}, /*append=*/true);  // same header: continued
    log.row({2, 0.25});
  }
  CHECK(contents(p) == "step,loss\n1,0.5\n2,0.25\n");

  const std::string msg = message_of<attn::io_error>([&] {
    attn::io::CsvLog log(p, {"step", "accuracy"}, /*append=*/true);
  });
  CHECK(msg.find("cannot append") != std::string::npos);
  CHECK(msg.find("'step,loss'") != std::string::npos);
  CHECK(msg.find("'step,accuracy'") != std::string::npos);
  CHECK(contents(p) == "step,loss\n1,0.5\n2,0.25\n");  // untouched

  // Without append the file starts over.
  { attn::io::CsvLog log(p, {"step", "accuracy"}); }
  CHECK(contents(p) == "step,accuracy\n");
}

TEST_CASE("CsvLog: append to an empty file writes the header; a cut-off row gets its own line") {
  TempDir dir;
  const fs::path empty = dir / "empty.csv";
  attn::io::write_file_atomically(empty, std::string_view(""));
  { attn::io::CsvLog log(empty, {"x"}, true); }
  CHECK(contents(empty) == "x\n");

  const fs::path cut = dir / "cut.csv";
  attn::io::write_file_atomically(cut, std::string_view("x,y\r\n1,2\n3,"));  // CRLF header too
  {
    attn::io::CsvLog log(cut, {"x", "y"}, true);
    log.row({5, 6});
  }
  CHECK(contents(cut) == "x,y\r\n1,2\n3,\n5,6\n");
}

TEST_CASE("CsvLog: column names with commas or quotes are quoted") {
  TempDir dir;
  const fs::path p = dir / "q.csv";
  { attn::io::CsvLog log(p, {"a,b", "say \"hi\"", "plain"}); }
  CHECK(contents(p) == "\"a,b\",\"say \"\"hi\"\"\",plain\n");
  { attn::io::CsvLog log(p, {"a,b", "say \"hi\"", "plain"}, true); }  // the same header matches
  CHECK(contents(p) == "\"a,b\",\"say \"\"hi\"\"\",plain\n");
  // A name with a line break spans two lines of the file; appending still recognises it.
  const fs::path nl = dir / "nl.csv";
  {
    attn::io::CsvLog log(nl, {"two\nlines", "x"});
    log.row({1, 2});
  }
  {
    attn::io::CsvLog log(nl, {"two\nlines", "x"}, true);
    log.row({3, 4});
  }
  CHECK(contents(nl) == "\"two\nlines\",x\n1,2\n3,4\n");
  CHECK(message_of<attn::io_error>([&] {
          attn::io::CsvLog log(nl, {"two\nlines"}, true);
        }).find("cannot append") != std::string::npos);
}

TEST_CASE("CsvLog: errors") {
  TempDir dir;
  const fs::path p = dir / "log.csv";
  attn::io::CsvLog log(p, {"a", "b"});
  const std::string count = message_of<attn::value_error>([&] { log.row({1, 2, 3}); });
  CHECK(count.find("3 values for 2 columns") != std::string::npos);
  CHECK(count.find("log.csv") != std::string::npos);
  CHECK(!message_of<attn::value_error>([&] { log.row({1}); }).empty());
  CHECK(contents(p) == "a,b\n");  // nothing written by the failed calls

  CHECK(message_of<attn::value_error>([&] {
          attn::io::CsvLog none(dir / "n.csv", {});
        }).find("no columns") != std::string::npos);

  const fs::path bad = dir / "missing_dir" / "log.csv";
  const std::string open = message_of<attn::io_error>([&] { attn::io::CsvLog l(bad, {"a"}); });
  CHECK(open.find("cannot open") != std::string::npos);
  CHECK(open.find(bad.string()) != std::string::npos);
  CHECK(open.find("No such file or directory") != std::string::npos);
}
