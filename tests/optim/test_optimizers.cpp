// The optimizers and gradient clipping: twelve steps of every optimizer against torch.optim (values
// in data/torch_optim.txt, written by torch_optim_reference.py), state names and resuming, config
// checks, and results independent of the thread count.
// Does not run PyTorch, and does not train a model (tests/autodiff/test_training.cpp does).
#include <doctest/doctest.h>

#include <attn/optim/optim.hpp>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "../test_util.hpp"
#include "../torch_reference_file.hpp"

using attn::index_t;
using attn::Parameter;
using attn::Shape;
using attn::Tensor;
using attn::optim::NamedParameter;
using attn::test::message_of;

namespace {

// ---- the reference file (format in torch_optim_reference.py)
// -------------------------------------

constexpr const char* format_line = "attn-torch-optim 1";
constexpr int steps = 12;
const char* const param_names[] = {"w", "e", "b"};

using torch_reference::cat;
using torch_reference::ReferenceFile;

const Tensor<double>& need(const std::string& name) {
  static const ReferenceFile file = torch_reference::load_reference(
      std::string(ATTN_TESTS_SOURCE_DIR) + "/optim/data/torch_optim.txt", format_line,
      "/usr/bin/python3 tests/optim/torch_optim_reference.py");
  return torch_reference::tensor(file, name);
}

// Prints every comparison's worst ratio when ATTN_OPTIM_VERBOSE is set (for reports).
bool verbose() {
  static const bool on = std::getenv("ATTN_OPTIM_VERBOSE") != nullptr;
  return on;
}

// |attn − torch| <= rtol |torch| + atol everywhere: double to ~1e-12, float to ~1e-5 relative.
template <class T>
struct Tolerance {
  static constexpr double rtol = std::is_same_v<T, double> ? 1e-12 : 1e-5;
  static constexpr double atol = std::is_same_v<T, double> ? 1e-15 : 1e-6;
};

// Fails naming `what` and the worst element unless `actual` is close to `expected`.
template <class T>
void check_close(const std::string& what, const Tensor<T>& actual, const Tensor<double>& expected) {
  REQUIRE_MESSAGE(actual.shape() == expected.shape(), what, ": attn shape ", actual.shape(),
                  " but torch shape ", expected.shape());
  double worst = 0.0;  // largest |difference| / allowed
  index_t at = -1;
  for (index_t i = 0; i < actual.numel(); ++i) {
    const double a = static_cast<double>(actual[i]), e = expected[i];
    const double ratio = std::abs(a - e) / (Tolerance<T>::rtol * std::abs(e) + Tolerance<T>::atol);
    if (!(ratio <= worst)) {  // NaN stays the worst
      worst = ratio;
      at = i;
      if (std::isnan(ratio)) break;
    }
  }
  if (verbose())
    std::cout << "  " << what << " (" << (std::is_same_v<T, double> ? "double" : "float")
              << "): worst difference " << worst << "x the tolerance\n";
  if (worst <= 1.0) return;
  FAIL_CHECK(what, ": element ", at, " attn ", cat(+actual[at]), " torch ", cat(expected[at]),
             " differs by ", worst, "x the tolerance (rtol ", Tolerance<T>::rtol, ", atol ",
             Tolerance<T>::atol, ")");
}

// The three parameters w [3, 4], e [2, 3], b [5] with their initial values from the file.
template <class T>
struct Params {
  Parameter<T> w, e, b;

  Params()
      : w(attn::cast<T>(need("param.w"))),
        e(attn::cast<T>(need("param.e"))),
        b(attn::cast<T>(need("param.b"))) {}

  Parameter<T>& operator[](const std::string& n) { return n == "w" ? w : n == "e" ? e : b; }

  // w and e decay, b does not: nanoGPT's rule, which default_decay implements.
  std::vector<NamedParameter<T>> named() {
    std::vector<NamedParameter<T>> out;
    for (const char* n : param_names)
      out.push_back({n, &(*this)[n], attn::optim::default_decay<T>(n, (*this)[n])});
    return out;
  }

  void set_grads(int step) {
    for (const char* n : param_names)
      (*this)[n].grad = attn::cast<T>(need(cat("grad.", step, ".", n)));
  }
};

// The twelve steps of `case_name` with optimizer `opt` (over `params`), then every value and state
// tensor (`states` of them) compared with torch.
template <class T, class Opt>
void run_against_torch(const std::string& case_name, Params<T>& params, Opt& opt, int states) {
  const Tensor<double>& lr = need("lr." + case_name);
  REQUIRE(lr.numel() == steps);
  for (int k = 1; k <= steps; ++k) {
    opt.set_lr(lr[k - 1]);
    params.set_grads(k);
    opt.step();
  }
  CHECK(opt.step_count() == steps);
  for (const char* n : param_names)
    check_close(cat(case_name, ".", n), params[n].value, need(cat(case_name, ".", n)));
  int seen = 0;
  opt.for_each_state([&](const std::string& name, Tensor<T>& t) {
    check_close(case_name + "." + name, t, need(case_name + "." + name));
    ++seen;
  });
  CHECK(seen == states);
}

}  // namespace

// ---- parity with torch.optim ------------------------------------------------------------------

TEST_CASE_TEMPLATE("SGD matches torch.optim.SGD over 12 steps with a changing lr", T, double,
                   float) {
  using attn::optim::SGD;
  using attn::optim::SGDConfig;
  struct Case {
    const char* name;
    SGDConfig config;
  };
  const Case cases[] = {
      {"sgd_plain", {.lr = 0.05}},
      {"sgd_momentum", {.lr = 0.05, .momentum = 0.9, .dampening = 0.1}},
      {"sgd_nesterov", {.lr = 0.05, .momentum = 0.8, .weight_decay = 0.01, .nesterov = true}},
      {"sgd_weight_decay", {.lr = 0.05, .weight_decay = 0.1}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.name);
    Params<T> params;
    SGD<T> opt(params.named(), c.config);
    run_against_torch(c.name, params, opt, c.config.momentum != 0 ? 3 : 0);
  }
}

TEST_CASE_TEMPLATE("Adam, AdamW and RAdam match torch.optim over 12 steps with a changing lr", T,
                   double, float) {
  using attn::optim::AdamConfig;
  SUBCASE("Adam") {
    Params<T> params;
    attn::optim::Adam<T> opt(params.named(), AdamConfig{.lr = 0.01});
    run_against_torch("adam", params, opt, 6);
  }
  SUBCASE("Adam with L2 weight decay (not on the bias)") {
    Params<T> params;
    attn::optim::Adam<T> opt(
        params.named(),
        {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.95, .eps = 1e-6, .weight_decay = 0.05});
    run_against_torch("adam_weight_decay", params, opt, 6);
  }
  SUBCASE("AdamW with decoupled weight decay (not on the bias)") {
    Params<T> params;
    attn::optim::AdamW<T> opt(params.named(),
                              {.lr = 0.01, .beta1 = 0.9, .beta2 = 0.95, .weight_decay = 0.1});
    run_against_torch("adamw", params, opt, 6);
  }
  SUBCASE("RAdam: 5 un-rectified steps, then 7 rectified") {
    CHECK(attn::optim::RAdam<T>::rho(0.999, 5) <= 5.0);
    CHECK(attn::optim::RAdam<T>::rho(0.999, 6) > 5.0);
    Params<T> params;
    attn::optim::RAdam<T> opt(params.named(), AdamConfig{.lr = 0.01});
    run_against_torch("radam", params, opt, 6);
  }
  SUBCASE("RAdam with L2 weight decay") {
    Params<T> params;
    attn::optim::RAdam<T> opt(
        params.named(),
        {.lr = 0.01, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.02});
    run_against_torch("radam_weight_decay", params, opt, 6);
  }
}

TEST_CASE("AdamW's default config is torch's: weight_decay 0.01") {
  Params<double> params;
  attn::optim::AdamW<double> opt(params.named());
  CHECK(opt.config().weight_decay == 0.01);
  CHECK(opt.config().lr == 1e-3);
  CHECK(opt.lr() == 1e-3);
  attn::optim::Adam<double> adam(params.named());
  CHECK(adam.config().weight_decay == 0.0);
}

// ---- clipping ---------------------------------------------------------------------------------

TEST_CASE_TEMPLATE("clip_grad_norm matches torch.nn.utils.clip_grad_norm_", T, double, float) {
  for (const char* c : {"clip_big", "clip_small"}) {
    CAPTURE(c);
    Params<T> params;
    for (const char* n : param_names) params[n].grad = attn::cast<T>(need(cat(c, ".in.", n)));
    const double max_norm = need(cat(c, ".max_norm"))[0];
    const double expected = need(cat(c, ".norm"))[0];
    const double norm = attn::optim::clip_grad_norm(params.named(), max_norm);
    CHECK(std::abs(norm - expected) <= Tolerance<T>::rtol * expected);
    for (const char* n : param_names)
      check_close(cat(c, ".out.", n), params[n].grad, need(cat(c, ".out.", n)));
    // After clipping, the norm is max_norm (up to the 1e-6 in the denominator) or unchanged.
    const double after = attn::optim::grad_norm(params.named());
    if (expected > max_norm)
      CHECK(after == doctest::Approx(max_norm).epsilon(1e-5));
    else
      CHECK(after == doctest::Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE_TEMPLATE("a NaN or Inf gradient makes clip_grad_norm throw, naming the parameter", T,
                   double, float) {
  Params<T> params;
  params.set_grads(1);
  const Tensor<T> w_grad = params.w.grad, b_grad = params.b.grad;
  params.e.grad[4] = std::numeric_limits<T>::quiet_NaN();
  const std::string msg =
      message_of<attn::value_error>([&] { attn::optim::clip_grad_norm(params.named(), 1.0); });
  CHECK(msg.find("clip_grad_norm") != std::string::npos);
  CHECK(msg.find("'e'") != std::string::npos);
  CHECK(msg.find("nan") != std::string::npos);
  CHECK(msg.find("element 4") != std::string::npos);
  // Nothing was scaled: the NaN did not spread and the other gradients are as they were.
  CHECK(attn::max_abs_diff(params.w.grad, w_grad) == 0.0);
  CHECK(attn::max_abs_diff(params.b.grad, b_grad) == 0.0);

  params.e.grad[4] = 0;
  params.b.grad[2] = -std::numeric_limits<T>::infinity();
  const std::string inf_msg =
      message_of<attn::value_error>([&] { attn::optim::grad_norm(params.named()); });
  CHECK(inf_msg.find("'b'") != std::string::npos);
  CHECK(inf_msg.find("-inf") != std::string::npos);

  if constexpr (std::is_same_v<T, double>) {  // finite elements whose squares overflow double
    params.b.grad[2] = 1e300;
    const std::string overflow =
        message_of<attn::value_error>([&] { attn::optim::grad_norm(params.named()); });
    CHECK(overflow.find("overflows") != std::string::npos);
    CHECK(overflow.find("'b'") != std::string::npos);
  }
  CHECK(message_of<attn::value_error>([&] {
          attn::optim::clip_grad_norm(params.named(), 0.0);
        }).find("max_norm must be > 0") != std::string::npos);
}

TEST_CASE("clip_grad_norm with max_norm = inf only measures; zero gradients stay zero") {
  Params<double> params;
  params.set_grads(3);
  const Tensor<double> w_grad = params.w.grad;
  const double n =
      attn::optim::clip_grad_norm(params.named(), std::numeric_limits<double>::infinity());
  CHECK(n == attn::optim::grad_norm(params.named()));
  CHECK(attn::max_abs_diff(params.w.grad, w_grad) == 0.0);
  for (const char* p : param_names) params[p].zero_grad();
  CHECK(attn::optim::clip_grad_norm(params.named(), 1.0) == 0.0);
  CHECK(params.w.grad[0] == 0.0);
}

// ---- state, resuming, bookkeeping -------------------------------------------------------------

TEST_CASE("for_each_state names every state tensor '<kind>.<param>' with the param's shape") {
  Params<double> params;
  auto collect = [](auto& opt) {
    std::vector<std::string> names;
    opt.for_each_state([&](const std::string& name, Tensor<double>& t) {
      names.push_back(name + " " + t.shape().str());
      CHECK(attn::max_abs_diff(t, Tensor<double>::zeros(t.shape())) == 0.0);  // zero at start
    });
    return names;
  };
  const std::vector<std::string> adam_names = {"exp_avg.w [3, 4]",    "exp_avg.e [2, 3]",
                                               "exp_avg.b [5]",       "exp_avg_sq.w [3, 4]",
                                               "exp_avg_sq.e [2, 3]", "exp_avg_sq.b [5]"};
  attn::optim::Adam<double> adam(params.named());
  CHECK(collect(adam) == adam_names);
  attn::optim::AdamW<double> adamw(params.named());
  CHECK(collect(adamw) == adam_names);
  attn::optim::RAdam<double> radam(params.named());
  CHECK(collect(radam) == adam_names);
  attn::optim::SGD<double> sgd_momentum(params.named(), {.momentum = 0.9});
  CHECK(collect(sgd_momentum) == std::vector<std::string>{"momentum_buffer.w [3, 4]",
                                                          "momentum_buffer.e [2, 3]",
                                                          "momentum_buffer.b [5]"});
  attn::optim::SGD<double> sgd(params.named());
  CHECK(collect(sgd).empty());

  // The const overload sees the same tensors (for a checkpoint writer).
  const auto& const_adam = adam;
  int n = 0;
  const_adam.for_each_state([&](const std::string&, const Tensor<double>&) { ++n; });
  CHECK(n == 6);
}

namespace {

// Runs `total` steps in one optimizer, and `split` steps in one then the rest in a fresh one that
// got the values, the state tensors and the step count: the results must be identical bit for bit.
template <class Make>
void check_resume(Make make, int split, int total) {
  Params<double> straight;
  auto a = make(straight);
  for (int k = 1; k <= total; ++k) {
    a.set_lr(0.01 * (1.0 + 0.1 * k));
    straight.set_grads(k);
    a.step();
  }

  Params<double> first;
  auto b = make(first);
  for (int k = 1; k <= split; ++k) {
    b.set_lr(0.01 * (1.0 + 0.1 * k));
    first.set_grads(k);
    b.step();
  }
  // "Checkpoint": copy values, state and step count into new objects (as a loader would).
  std::map<std::string, Tensor<double>> saved;
  b.for_each_state([&](const std::string& name, Tensor<double>& t) { saved[name] = t; });
  Params<double> resumed;
  for (const char* n : param_names) resumed[n].value = first[n].value;
  auto c = make(resumed);
  c.for_each_state([&](const std::string& name, Tensor<double>& t) { t = saved.at(name); });
  c.set_step_count(b.step_count());
  for (int k = split + 1; k <= total; ++k) {
    c.set_lr(0.01 * (1.0 + 0.1 * k));
    resumed.set_grads(k);
    c.step();
  }
  CHECK(c.step_count() == total);
  for (const char* n : param_names)
    CHECK(attn::max_abs_diff(resumed[n].value, straight[n].value) == 0.0);
  std::map<std::string, Tensor<double>> end_a, end_c;
  a.for_each_state([&](const std::string& name, Tensor<double>& t) { end_a[name] = t; });
  c.for_each_state([&](const std::string& name, Tensor<double>& t) { end_c[name] = t; });
  REQUIRE(end_a.size() == end_c.size());
  for (const auto& [name, t] : end_a) CHECK(attn::max_abs_diff(t, end_c.at(name)) == 0.0);
}

}  // namespace

TEST_CASE("restoring state and step count reproduces an uninterrupted run bit for bit") {
  using namespace attn::optim;
  SUBCASE("SGD with momentum") {
    check_resume([](Params<double>& p) { return SGD<double>(p.named(), {.momentum = 0.9}); }, 5,
                 10);
  }
  SUBCASE("SGD Nesterov with weight decay") {
    check_resume(
        [](Params<double>& p) {
          return SGD<double>(p.named(), {.momentum = 0.9, .weight_decay = 0.1, .nesterov = true});
        },
        5, 10);
  }
  SUBCASE("Adam") {
    check_resume([](Params<double>& p) { return Adam<double>(p.named(), {.weight_decay = 0.1}); },
                 5, 10);
  }
  SUBCASE("AdamW") {
    check_resume([](Params<double>& p) { return AdamW<double>(p.named()); }, 5, 10);
  }
  SUBCASE("RAdam, resumed across the rectification threshold") {
    check_resume([](Params<double>& p) { return RAdam<double>(p.named()); }, 5, 10);
  }
}

TEST_CASE("step counts steps, set_lr sets the lr, zero_grad zeroes every gradient") {
  Params<float> params;
  attn::optim::Adam<float> opt(params.named(), {.lr = 0.5});
  CHECK(opt.lr() == 0.5);
  CHECK(opt.step_count() == 0);
  CHECK(opt.parameters().size() == 3);
  CHECK(opt.parameters()[0].name == "w");
  CHECK(opt.parameters()[2].decay == false);
  params.set_grads(1);
  opt.step();
  opt.step();
  CHECK(opt.step_count() == 2);
  opt.set_lr(0.25);
  CHECK(opt.lr() == 0.25);
  opt.zero_grad();
  for (const char* n : param_names)
    CHECK(attn::max_abs_diff(params[n].grad, Tensor<float>::zeros(params[n].grad.shape())) == 0.0);
  // A zero gradient still moves Adam's parameters (momentum), and lr 0 does not.
  const Tensor<float> before = params.w.value;
  opt.set_lr(0.0);
  opt.step();
  CHECK(attn::max_abs_diff(params.w.value, before) == 0.0);
}

// ---- parameters_of and the decay rule ---------------------------------------------------------

namespace {

struct TinyBlock {
  Parameter<double> weight{Tensor<double>::zeros({4, 3})};
  Parameter<double> bias{Tensor<double>::zeros({4})};
  Parameter<double> ln_gain{Tensor<double>::ones({4})};
  Parameter<double> embedding{Tensor<double>::zeros({10, 4})};

  template <class F>
  void for_each_parameter(F&& f) {
    f(std::string("embedding.weight"), embedding);
    f(std::string("blocks.0.linear.weight"), weight);
    f(std::string("blocks.0.linear.bias"), bias);
    f("blocks.0.ln.weight", ln_gain);  // a const char* name works too
  }
};

static_assert(attn::optim::ParameterModule<TinyBlock, double>);
static_assert(!attn::optim::ParameterModule<int, double>);

}  // namespace

TEST_CASE("parameters_of collects a module's parameters with nanoGPT's decay rule") {
  TinyBlock m;
  const auto params = attn::optim::parameters_of<double>(m);
  REQUIRE(params.size() == 4);
  CHECK(params[0].name == "embedding.weight");
  CHECK(params[0].param == &m.embedding);
  CHECK(params[0].decay);        // rank 2: embeddings decay
  CHECK(params[1].decay);        // rank 2: linear weights decay
  CHECK_FALSE(params[2].decay);  // rank 1: biases do not
  CHECK_FALSE(params[3].decay);  // rank 1: LayerNorm gains do not
  CHECK(params[3].name == "blocks.0.ln.weight");
  attn::optim::AdamW<double> opt(params);
  CHECK(opt.parameters().size() == 4);
}

TEST_CASE("mingpt_decay: every name without \"bias\" decays, LayerNorm gains included") {
  TinyBlock m;
  auto params = attn::optim::parameters_of<double>(m);
  for (auto& p : params) p.decay = attn::optim::mingpt_decay(p.name, *p.param);
  REQUIRE(params.size() == 4);
  CHECK(params[0].decay);        // embedding.weight
  CHECK(params[1].decay);        // a linear weight
  CHECK_FALSE(params[2].decay);  // its bias
  CHECK(params[3].decay);        // blocks.0.ln.weight: unlike nanoGPT's rule
  CHECK(attn::optim::mingpt_decay("blocks.0.ln1.bias", *params[2].param) == false);
}

// ---- checks -----------------------------------------------------------------------------------

TEST_CASE("invalid configs and parameter lists throw value_error naming optimizer and field") {
  using namespace attn::optim;
  Params<double> p;
  auto sgd_error = [&](SGDConfig c) {
    return message_of<attn::value_error>([&] { SGD<double> o(p.named(), c); });
  };
  auto adam_error = [&](AdamConfig c) {
    return message_of<attn::value_error>([&] { Adam<double> o(p.named(), c); });
  };
  CHECK(sgd_error({.lr = -1}) == "SGD: lr must be a finite number >= 0, got -1");
  CHECK(sgd_error({.lr = std::nan("")}).find("SGD: lr must be") == 0);
  CHECK(sgd_error({.momentum = -0.5}) == "SGD: momentum must be a finite number >= 0, got -0.5");
  CHECK(sgd_error({.dampening = 2}) == "SGD: dampening must be in [0, 1], got 2");
  CHECK(sgd_error({.weight_decay = -1}).find("SGD: weight_decay must be") == 0);
  CHECK(sgd_error({.nesterov = true}) ==
        "SGD: nesterov needs momentum > 0 and dampening == 0, got momentum 0 and dampening 0");
  CHECK(sgd_error({.momentum = 0.9, .dampening = 0.1, .nesterov = true}).find("nesterov") !=
        std::string::npos);
  CHECK(adam_error({.beta1 = 1.0}) == "Adam: beta1 must be in [0, 1), got 1");
  CHECK(adam_error({.beta2 = -0.1}) == "Adam: beta2 must be in [0, 1), got -0.1");
  CHECK(adam_error({.eps = 0}) == "Adam: eps must be a finite number > 0, got 0");
  CHECK(adam_error({.weight_decay = -0.01}).find("Adam: weight_decay must be") == 0);
  CHECK(message_of<attn::value_error>([&] {
          AdamW<double> o(p.named(), {.lr = -1});
        }).find("AdamW: lr") == 0);
  CHECK(message_of<attn::value_error>([&] { RAdam<double> o(p.named(), {.beta2 = 1.5}); }) ==
        "RAdam: beta2 must be in [0, 1), got 1.5");

  // The parameter list.
  CHECK(message_of<attn::value_error>([&] { Adam<double> o({}); }) ==
        "Adam: no parameters to optimize");
  auto list = p.named();
  list[1].param = nullptr;
  CHECK(message_of<attn::value_error>([&] { Adam<double> o(list); }) ==
        "Adam: parameter 'e' is a null pointer");
  list = p.named();
  list[2].name = "w";
  CHECK(message_of<attn::value_error>([&] { Adam<double> o(list); }) ==
        "Adam: parameter name 'w' is used twice (parameters 0 and 2)");
  list = p.named();
  list[2].param = list[0].param;
  CHECK(message_of<attn::value_error>([&] {
          SGD<double> o(list);
        }).find("'w' and 'b' are the same Parameter") != std::string::npos);
  list = p.named();
  list[0].name = "";
  CHECK(message_of<attn::value_error>([&] { SGD<double> o(list); }) ==
        "SGD: parameter 0 has an empty name");

  // Gradient shapes, at construction and at each step.
  p.e.grad = Tensor<double>::zeros({3, 2});
  CHECK(message_of<attn::shape_error>([&] { AdamW<double> o(p.named()); }) ==
        "AdamW: the gradient of 'e' has shape [3, 2], its value has shape [2, 3]");
  p.e.grad = Tensor<double>::zeros({2, 3});
  Adam<double> opt(p.named());
  p.b.grad = Tensor<double>::zeros({4});
  CHECK(message_of<attn::shape_error>([&] { opt.step(); }).find("gradient of 'b'") !=
        std::string::npos);
  CHECK(opt.step_count() == 0);
  p.b.grad = Tensor<double>::zeros({5});

  // A state tensor a loader replaced with the wrong shape.
  opt.for_each_state([](const std::string& name, Tensor<double>& t) {
    if (name == "exp_avg_sq.w") t = Tensor<double>::zeros({4, 3});
  });
  CHECK(message_of<attn::shape_error>([&] { opt.step(); }) ==
        "Adam: state tensor 'exp_avg_sq.w' has shape [4, 3], the parameter has shape [3, 4]");

  // Runtime setters.
  CHECK(message_of<attn::value_error>([&] { opt.set_lr(-0.1); }) ==
        "Adam: lr must be a finite number >= 0, got -0.1");
  CHECK(message_of<attn::value_error>([&] { opt.set_step_count(-1); }) ==
        "Adam::set_step_count: the step count must be >= 0, got -1");
}

// ---- threads ----------------------------------------------------------------------------------

namespace {

// A parameter large enough to be split into several blocks (and so run on several threads).
constexpr index_t big = 5 * attn::optim::detail::optim_block + 123;

template <class Opt, class Config>
Tensor<float> run_big(int threads, Config config) {
  attn::set_num_threads(threads);
  Parameter<float> w(Tensor<float>({big}));
  Parameter<float> m(Tensor<float>({big / 7, 7}));
  for (index_t i = 0; i < big; ++i) w.value[i] = std::sin(0.001f * static_cast<float>(i));
  std::vector<NamedParameter<float>> params = {{"w", &w, true}, {"m", &m, true}};
  Opt opt(params, config);
  for (int k = 1; k <= 7; ++k) {
    for (index_t i = 0; i < big; ++i)
      w.grad[i] = std::cos(0.37f * static_cast<float>(k * (i % 1000)));
    for (index_t i = 0; i < m.grad.numel(); ++i) m.grad[i] = 1e-3f * static_cast<float>(i % 97);
    attn::optim::clip_grad_norm(params, 50.0);
    opt.step();
  }
  Tensor<float> out({big + m.value.numel()});
  std::copy(w.value.begin(), w.value.end(), out.begin());
  std::copy(m.value.begin(), m.value.end(), out.begin() + big);
  return out;
}

}  // namespace

TEST_CASE("results do not depend on the thread count") {
  using namespace attn::optim;
  const int saved = attn::num_threads();
  CHECK(attn::max_abs_diff(
            run_big<SGD<float>>(1, SGDConfig{.momentum = 0.9, .weight_decay = 0.1}),
            run_big<SGD<float>>(2, SGDConfig{.momentum = 0.9, .weight_decay = 0.1})) == 0.0);
  CHECK(attn::max_abs_diff(run_big<Adam<float>>(1, AdamConfig{.weight_decay = 0.1}),
                           run_big<Adam<float>>(2, AdamConfig{.weight_decay = 0.1})) == 0.0);
  CHECK(attn::max_abs_diff(run_big<AdamW<float>>(1, AdamW<float>::default_config()),
                           run_big<AdamW<float>>(2, AdamW<float>::default_config())) == 0.0);
  CHECK(attn::max_abs_diff(run_big<RAdam<float>>(1, AdamConfig{}),
                           run_big<RAdam<float>>(2, AdamConfig{})) == 0.0);

  // The norm itself, bit for bit.
  Parameter<double> g(Tensor<double>({big}));
  for (index_t i = 0; i < big; ++i) g.grad[i] = std::sin(1e-3 * static_cast<double>(i)) * 1e-3;
  const std::vector<NamedParameter<double>> params = {{"g", &g, true}};
  attn::set_num_threads(1);
  const double n1 = grad_norm(params);
  attn::set_num_threads(2);
  const double n2 = grad_norm(params);
  CHECK(n1 == n2);
  attn::set_num_threads(saved);
}
