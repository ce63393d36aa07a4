// attn/nn/recurrent.hpp: the gated recurrent unit (GRUCell, one step) and GRU (a whole sequence,
// one or both directions, padded batches), built from matmul, slice and fused sigmoid/tanh
// expressions, so their gradients are the autodiff ops' own. PyTorch's layouts and gate order.
// Does not stack layers, add dropout between them nor offer an LSTM; a sequence is run step by
// step (O(T) tape nodes), which is what an RNN is.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "layers.hpp"

namespace attn::nn {

// One GRU step (Cho et al. 2014), as torch.nn.GRUCell, gates ordered (r, z, n):
//     r  = σ(W_ir x + b_ir + W_hr h + b_hr)          reset gate
//     z  = σ(W_iz x + b_iz + W_hz h + b_hz)          update gate
//     n  = tanh(W_in x + b_in + r ⊙ (W_hn h + b_hn))  candidate state
//     h' = (1 − z) ⊙ n + z ⊙ h
// weight_ih [3H, I] stacks W_ir, W_iz, W_in; weight_hh [3H, H] stacks W_hr, W_hz, W_hn; every
// weight and bias starts ~ U(−1/√H, 1/√H), PyTorch's initialisation.
template <class T = float>
struct GRUCell {
  Parameter<T> weight_ih, weight_hh;  // [3H, I], [3H, H]
  Parameter<T> bias_ih, bias_hh;      // [3H], [3H]

  GRUCell() = default;
  GRUCell(index_t input, index_t hidden, Rng& rng) {
    ATTN_CHECK(input > 0 && hidden > 0, value_error, "nn::GRUCell: input (", input,
               ") and hidden (", hidden, ") sizes must be positive");
    const double a = 1.0 / std::sqrt(double(hidden));
    weight_ih = Parameter<T>(Tensor<T>::uniform({3 * hidden, input}, rng, -a, a));
    weight_hh = Parameter<T>(Tensor<T>::uniform({3 * hidden, hidden}, rng, -a, a));
    bias_ih = Parameter<T>(Tensor<T>::uniform({3 * hidden}, rng, -a, a));
    bias_hh = Parameter<T>(Tensor<T>::uniform({3 * hidden}, rng, -a, a));
  }

  index_t input_size() const { return weight_ih.value.shape()[1]; }
  index_t hidden_size() const { return weight_hh.value.shape()[1]; }

  // The input half of the three gates, W_i· x + b_i·, for any leading shape: x [..., I] ->
  // [..., 3H]. A sequence computes it for every step with one GEMM before the recurrence.
  Var<T> input_gates(const Var<T>& x) {
    ATTN_CHECK(x.shape().last() == input_size(), shape_error, "nn::GRUCell: input ", x.shape(),
               " does not end in input_size = ", input_size());
    Tape<T>& tape = x.tape();
    return matmul(x, tape.param(weight_ih), false, true) + tape.param(bias_ih);
  }

  // One step from precomputed input gates gi [B, 3H] and the state h [B, H] -> h' [B, H].
  Var<T> step(const Var<T>& gi, const Var<T>& h) {
    const index_t H = hidden_size();
    ATTN_CHECK(h.shape().rank() == 2 && h.shape()[1] == H && gi.shape().rank() == 2 &&
                   gi.shape()[0] == h.shape()[0] && gi.shape()[1] == 3 * H,
               shape_error, "nn::GRUCell: gates ", gi.shape(), " and state ", h.shape(),
               " must be [B, ", 3 * H, "] and [B, ", H, "]");
    Tape<T>& tape = h.tape();
    const Var<T> gh = matmul(h, tape.param(weight_hh), false, true) + tape.param(bias_hh);
    const Var<T> r = sigmoid(slice(gi, 0, H) + slice(gh, 0, H));
    const Var<T> z = sigmoid(slice(gi, H, 2 * H) + slice(gh, H, 2 * H));
    const Var<T> n = tanh(slice(gi, 2 * H, 3 * H) + r * slice(gh, 2 * H, 3 * H));
    return (T(1) - z) * n + z * h;
  }

  // One step: x [B, I], h [B, H] -> h' [B, H].
  Var<T> operator()(const Var<T>& x, const Var<T>& h) { return step(input_gates(x), h); }

  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    f(join_name(prefix, "weight_ih"), weight_ih);
    f(join_name(prefix, "weight_hh"), weight_hh);
    f(join_name(prefix, "bias_ih"), bias_ih);
    f(join_name(prefix, "bias_hh"), bias_hh);
  }
};

template <class T>
struct GRUOutput {
  Var<T> states;  // [B, T, dirs·H]: every position's state (both directions side by side)
  Var<T> last;    // [B, dirs·H]: the forward state after the last valid position, then the
                  // backward state at position 0
};

// A one-layer GRU over a batch of sequences, as torch.nn.GRU(batch_first=True, num_layers=1):
// forward in time, and with `bidirectional` also backward, the two state sequences concatenated.
// Padded batches: sequence b has lengths[b] valid positions at the front; past them a step keeps
// the state unchanged, h_t = m ⊙ h'_t + (1 − m) ⊙ h_{t−1} (m = 0 on padding), so every valid
// position's state, and `last`, equal those of the unpadded sequence, in both directions.
template <class T = float>
struct GRU {
  GRUCell<T> forward_cell, backward_cell;
  bool bidirectional = false;

  GRU() = default;
  GRU(index_t input, index_t hidden, bool bidirectional_, Rng& rng)
      : forward_cell(input, hidden, rng), bidirectional(bidirectional_) {
    if (bidirectional) backward_cell = GRUCell<T>(input, hidden, rng);
  }

  index_t hidden_size() const { return forward_cell.hidden_size(); }
  index_t directions() const { return bidirectional ? 2 : 1; }

  // x [B, T, I]; h0 [B, dirs·H] or none (zeros); lengths: B values in [1, T] or empty (all T).
  GRUOutput<T> operator()(const Var<T>& x, const std::vector<index_t>& lengths = {},
                          const Var<T>* h0 = nullptr) {
    const Shape& s = x.shape();
    ATTN_CHECK(s.rank() == 3 && s[1] > 0, shape_error, "nn::GRU: x must be [B, T, I], got ", s);
    const index_t B = s[0], H = hidden_size(), D = directions();
    ATTN_CHECK(lengths.empty() || index_t(lengths.size()) == B, shape_error,
               "nn::GRU: ", lengths.size(), " lengths for a batch of ", B);
    for (const index_t l : lengths)
      ATTN_CHECK(l >= 1 && l <= s[1], value_error, "nn::GRU: length ", l, " outside [1, ", s[1],
                 "]");
    ATTN_CHECK(h0 == nullptr ||
                   (h0->shape().rank() == 2 && h0->shape()[0] == B && h0->shape()[1] == D * H),
               shape_error, "nn::GRU: h0 must be [", B, ", ", D * H, "], got ",
               h0 ? h0->shape() : Shape{});
    Tape<T>& tape = x.tape();
    const auto initial = [&](index_t dir) {
      if (h0 == nullptr) return tape.leaf(Tensor<T>::zeros({B, H}));
      return D == 1 ? *h0 : slice(*h0, dir * H, (dir + 1) * H);
    };
    const Run fwd = run(forward_cell, x, lengths, initial(0), false);
    if (!bidirectional) return {fwd.states, fwd.last};
    const Run bwd = run(backward_cell, x, lengths, initial(1), true);
    return {concat({fwd.states, bwd.states}, -1), concat({fwd.last, bwd.last}, -1)};
  }

  // weight_ih_l0, weight_hh_l0, bias_ih_l0, bias_hh_l0 (and …_l0_reverse): torch.nn.GRU's names.
  template <class F>
  void for_each_parameter(F&& f, std::string_view prefix = "") {
    const auto visit = [&](GRUCell<T>& c, std::string_view suffix) {
      c.for_each_parameter([&](const std::string& name, Parameter<T>& p) {
        f(join_name(prefix, name + "_l0" + std::string(suffix)), p);
      });
    };
    visit(forward_cell, "");
    if (bidirectional) visit(backward_cell, "_reverse");
  }

 private:
  struct Run {
    Var<T> states, last;
  };

  // One direction: every step's state [B, T, H] in time order, and the final state [B, H].
  static Run run(GRUCell<T>& cell, const Var<T>& x, const std::vector<index_t>& lengths, Var<T> h,
                 bool reverse) {
    const index_t B = x.shape()[0], T_ = x.shape()[1], H = cell.hidden_size();
    Tape<T>& tape = x.tape();
    const Var<T> gates = cell.input_gates(x);  // [B, T, 3H], one GEMM for all steps
    std::vector<Var<T>> states(static_cast<std::size_t>(T_));
    for (index_t i = 0; i < T_; ++i) {
      const index_t t = reverse ? T_ - 1 - i : i;
      const Var<T> gi = reshape(slice(gates, t, t + 1, 1), {B, 3 * H});
      const Var<T> next = cell.step(gi, h);
      bool padded = false;
      for (const index_t l : lengths) padded = padded || t >= l;
      if (padded) {  // keep the state where position t is padding
        Tensor<T> m({B, H});
        for (index_t b = 0; b < B; ++b)
          for (index_t j = 0; j < H; ++j) m(b, j) = t < lengths[std::size_t(b)] ? T(1) : T(0);
        const Var<T> keep = tape.leaf(m);
        h = keep * next + (T(1) - keep) * h;
      } else {
        h = next;
      }
      states[static_cast<std::size_t>(t)] = reshape(h, {B, 1, H});
    }
    return {concat(std::span<const Var<T>>(states), 1), h};
  }
};

}  // namespace attn::nn
