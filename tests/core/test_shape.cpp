// Tests for attn::Shape (core/shape.hpp): rank 0 to 4, element counts, row-major strides,
// negative axes, printing, and the errors a bad shape or axis raises.
#include <doctest/doctest.h>
#include <attn/core/shape.hpp>

#include <array>
#include <sstream>
#include <string>
#include <vector>

#include "../test_util.hpp"

using attn::test::message_of;

TEST_CASE("Shape: rank 0 is a scalar with one element") {
  const attn::Shape s;
  CHECK(s.rank() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.last() == 1);
  CHECK(s.dims().empty());
  CHECK(s.str() == "[]");
  CHECK(s == attn::Shape{});
}

TEST_CASE("Shape: ranks 1 to 4 report their dims, numel and row-major strides") {
  SUBCASE("rank 1") {
    const attn::Shape s{7};
    CHECK(s.rank() == 1);
    CHECK(s.numel() == 7);
    CHECK(s.stride(0) == 1);
    CHECK(s.last() == 7);
  }
  SUBCASE("rank 2") {
    const attn::Shape s{4, 3};
    CHECK(s.rank() == 2);
    CHECK(s[0] == 4);
    CHECK(s[1] == 3);
    CHECK(s.numel() == 12);
    CHECK(s.stride(0) == 3);
    CHECK(s.stride(1) == 1);
  }
  SUBCASE("rank 3") {
    const attn::Shape s{2, 5, 3};
    CHECK(s.numel() == 30);
    CHECK(s.stride(0) == 15);
    CHECK(s.stride(1) == 3);
    CHECK(s.stride(2) == 1);
  }
  SUBCASE("rank 4") {
    const attn::Shape s{2, 3, 4, 5};  // [B, H, T, Dh]
    CHECK(s.rank() == 4);
    CHECK(s.numel() == 120);
    CHECK(s.stride(0) == 60);
    CHECK(s.stride(1) == 20);
    CHECK(s.stride(2) == 5);
    CHECK(s.stride(3) == 1);
    CHECK(s.last() == 5);
    const auto d = s.dims();
    CHECK(std::vector<attn::index_t>(d.begin(), d.end()) == std::vector<attn::index_t>{2, 3, 4, 5});
  }
}

TEST_CASE("Shape: a zero dimension gives zero elements") {
  const attn::Shape s{3, 0, 2};
  CHECK(s.rank() == 3);
  CHECK(s.numel() == 0);
  CHECK(s.stride(0) == 0);
  CHECK(s.stride(1) == 2);
}

TEST_CASE("Shape: built from a span") {
  const std::array<attn::index_t, 3> dims{2, 3, 4};
  const attn::Shape s{std::span<const attn::index_t>(dims)};
  CHECK(s == attn::Shape{2, 3, 4});
  CHECK(s.numel() == 24);
}

TEST_CASE("Shape: dim() accepts negative axes counted from the end") {
  const attn::Shape s{2, 3, 4, 5};
  CHECK(s.dim(0) == 2);
  CHECK(s.dim(3) == 5);
  CHECK(s.dim(-1) == 5);
  CHECK(s.dim(-2) == 4);
  CHECK(s.dim(-4) == 2);
  CHECK(s.normalize_axis(-1, "test") == 3);
  CHECK(s.normalize_axis(-4, "test") == 0);
  CHECK(s.normalize_axis(2, "test") == 2);
}

TEST_CASE("Shape: equality compares rank and every dimension") {
  CHECK(attn::Shape{4, 3} == attn::Shape{4, 3});
  CHECK(attn::Shape{4, 3} != attn::Shape{3, 4});
  CHECK(attn::Shape{12} != attn::Shape{4, 3});
  CHECK(attn::Shape{4, 3} != attn::Shape{4, 3, 1});
  CHECK(attn::Shape{1} != attn::Shape{});
}

TEST_CASE("Shape: prints as [d0, d1, ...]") {
  std::ostringstream os;
  os << attn::Shape{4, 3};
  CHECK(os.str() == "[4, 3]");
  CHECK(attn::Shape{7}.str() == "[7]");
  CHECK(attn::Shape{2, 3, 4, 5}.str() == "[2, 3, 4, 5]");
  CHECK(attn::Shape{0}.str() == "[0]");
}

TEST_CASE("Shape: rank 5 throws shape_error naming the rank") {
  CHECK_THROWS_AS(attn::Shape({1, 2, 3, 4, 5}), attn::shape_error);
  const std::string msg = message_of<attn::shape_error>([] { attn::Shape s{1, 2, 3, 4, 5}; });
  CHECK(msg.find("rank 5") != std::string::npos);
  CHECK(msg.find('4') != std::string::npos);  // the maximum
  // shape_error is an attn::error, so a caller can catch every attn failure at once.
  CHECK_THROWS_AS(attn::Shape({1, 2, 3, 4, 5}), attn::error);
}

TEST_CASE("Shape: a negative dimension throws shape_error") {
  CHECK_THROWS_AS(attn::Shape({3, -1}), attn::shape_error);
  const std::string msg = message_of<attn::shape_error>([] { attn::Shape s{3, -2}; });
  CHECK(msg.find("-2") != std::string::npos);
  CHECK(msg.find("axis 1") != std::string::npos);
}

TEST_CASE("Shape: an axis out of range throws value_error naming the operation and the shape") {
  const attn::Shape s{4, 3};
  CHECK_THROWS_AS((void)s.dim(2), attn::value_error);
  CHECK_THROWS_AS((void)s.dim(-3), attn::value_error);
  CHECK_NOTHROW((void)s.dim(-2));
  const std::string msg =
      message_of<attn::value_error>([&] { (void)s.normalize_axis(5, "softmax"); });
  CHECK(msg.find("softmax") != std::string::npos);
  CHECK(msg.find("axis 5") != std::string::npos);
  CHECK(msg.find("[4, 3]") != std::string::npos);
  // A scalar has no axis at all.
  CHECK_THROWS_AS((void)attn::Shape{}.dim(0), attn::value_error);
  CHECK_THROWS_AS((void)attn::Shape{}.dim(-1), attn::value_error);
}

TEST_CASE("Shape: dimensions whose product exceeds 2^63 - 1 are a shape_error, never a wrap") {
  const attn::index_t big = attn::index_t{1} << 31, huge = attn::index_t{1} << 32;
  // [2^32, 2^32] wrapped to 0 elements, [2^31]^4 to 0, [2^31]^3 to a negative count; with a zero
  // dimension the count is 0 but a stride would still overflow.
  CHECK_THROWS_WITH_AS((attn::Shape{huge, huge}),
                       "Shape: [4294967296, 4294967296] has dimensions whose product exceeds 2^63 "
                       "- 1",
                       attn::shape_error);
  CHECK_THROWS_AS((attn::Shape{big, big, big}), attn::shape_error);
  CHECK_THROWS_AS((attn::Shape{big, big, big, big}), attn::shape_error);
  CHECK_THROWS_AS((attn::Shape{0, huge, huge}), attn::shape_error);
  CHECK_THROWS_AS((attn::Shape{huge, huge, 0}), attn::shape_error);
  // The largest counts that fit are fine, and so is a zero dimension beside ones that fit.
  CHECK(attn::Shape{big, big}.numel() == attn::index_t{1} << 62);
  CHECK(attn::Shape{0, big, big}.numel() == 0);
  CHECK(attn::Shape{0, big, big}.stride(0) == attn::index_t{1} << 62);
}
