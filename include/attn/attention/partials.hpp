// attn/attention/partials.hpp: softmax attention over part of the keys as a partial result,
// its output together with each row's log-sum-exp, and the exact merge of two partials over
// disjoint key sets, differentiable in all four inputs. With them, attention over keys split in
// chunks (chunked prefill, keys split across ranks or devices) is the merge of the chunks'
// partials, forward and backward.
//
// For a row with scores s_j over key set J: lse_J = log Σ_{j∈J} e^{s_j} (−∞ when no key of J is
// allowed) and o_J = Σ_{j∈J} e^{s_j − lse_J} v_j (0 then). Two disjoint parts A, B merge to
//     lse = log(e^{lse_A} + e^{lse_B}),  o = w_A o_A + w_B o_B,  w_X = e^{lse_X − lse},
// by the same merge of softmax states as the tiled kernels (online_softmax_merge.hpp); backward:
//     dO_X = w_X dO,  dlse_X = w_X (dO · (o_X − o) + dlse).
// A part with no allowed key is the identity; a row with none in either part stays 0 with
// lse = −∞ and passes no gradient. Does not compute attention itself: the fused kernel gives a
// partial (online_softmax_attention_partial, Attention::partial).
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>

#include "../autodiff/autodiff.hpp"
#include "../core/parallel.hpp"
#include "online_softmax_merge.hpp"

namespace attn {

template <class T>
struct AttentionPartial {
  Var<T> output;  // [B, H, Tq, Dv]
  Var<T> lse;     // [B, H, Tq]: each row's log-sum-exp over the keys the part saw
};

namespace detail {

// The second output of an operation that makes two (the log-sum-exp beside an attention output):
// its own node, whose gradient backward hands to the first output's node as saved[slot], with
// saved_index[0] = 1 to say it came (that node's backward reads it and sets 0 again). It also
// makes the first output's backward run when nothing used its value: it asks for its gradient,
// which is then zeros. The first node is older on the tape, so its backward runs after this one.
struct SecondOutputOp {
  std::int32_t first;
  std::int32_t slot;
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    tape.grad(first);
    Node<T>& n = tape.node(first);
    Tensor<T>& to = n.saved[static_cast<std::size_t>(slot)];
    to.resize(self.grad->shape());
    std::copy_n(self.grad->data(), to.numel(), to.data());
    n.saved_index[0] = 1;
  }
};

// Prepares node `first` (which must keep saved[slot] free for it) to receive its second output's
// gradient, and pushes that output with value `value` (numel of `shape`).
template <class T>
Var<T> push_second_output(Tape<T>& tape, const Var<T>& first, Node<T>& first_node, std::size_t slot,
                          const Shape& shape, const T* value, std::string_view name) {
  first_node.saved_index.assign(1, 0);
  auto [out, node] = tape.push(shape, name, first_node.requires_grad);
  std::copy_n(value, node.value->numel(), node.value->data());
  tape.set_backward(node, SecondOutputOp{first.index(), static_cast<std::int32_t>(slot)});
  return out;
}

// The gradient a node's second output delivered in this backward pass, or null; taking it
// clears the flag for the next pass.
template <class T>
const T* take_second_gradient(Node<T>& n, std::size_t slot) {
  if (n.saved_index.empty() || n.saved_index[0] == 0) return nullptr;
  n.saved_index[0] = 0;
  return n.saved[slot].data();
}

struct MergePartialsOp {
  std::int32_t oa, la, ob, lb;
  index_t rows, dv;
  // self.saved[0], [1]: w_A, w_B per row; self.saved[2]: dlse, when the merged lse was used.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* dlse = take_second_gradient(self, 2);
    const T* wa = self.saved[0].data();
    const T* wb = self.saved[1].data();
    const T* o = self.value->data();
    const T* dout = self.grad->data();
    const T* xa = tape.value(oa).data();
    const T* xb = tape.value(ob).data();
    auto grad_of = [&](std::int32_t i) {
      return tape.requires_grad(i) ? tape.grad(i).data() : nullptr;
    };
    // One operand may be both parts (merge(x, x)): every gradient is accumulated.
    T* ga = grad_of(oa);
    T* gla = grad_of(la);
    T* gb = grad_of(ob);
    T* glb = grad_of(lb);
    parallel_for(rows, 6.0 * double(dv), [&](index_t r) {
      const T* d = dout + r * dv;
      if (wa[r] == T{0} && wb[r] == T{0}) return;  // nothing allowed in either part
      T da = dlse ? dlse[r] : T{0}, db = da;
      for (index_t c = 0; c < dv; ++c) {
        da += d[c] * (xa[r * dv + c] - o[r * dv + c]);
        db += d[c] * (xb[r * dv + c] - o[r * dv + c]);
      }
      if (ga)
        for (index_t c = 0; c < dv; ++c) ga[r * dv + c] += wa[r] * d[c];
      if (gb)
        for (index_t c = 0; c < dv; ++c) gb[r * dv + c] += wb[r] * d[c];
      if (gla) gla[r] += wa[r] * da;
      if (glb) glb[r] += wb[r] * db;
    });
  }
};

// Throws shape_error unless p is an attention partial: output [..., Dv] of rank 4 and lse of the
// output's shape without its last dimension.
template <class T>
void check_partial(const AttentionPartial<T>& p, const char* which) {
  ATTN_CHECK(p.output.valid() && p.lse.valid(), value_error, "merge_attention: partial ", which,
             " has an unassigned output or lse");
  const Shape& o = p.output.shape();
  ATTN_CHECK(o.rank() == 4, shape_error, "merge_attention: partial ", which,
             " output must be [B, H, Tq, Dv], got ", o);
  ATTN_CHECK(p.lse.shape() == (Shape{o[0], o[1], o[2]}), shape_error, "merge_attention: partial ",
             which, " lse must be ", Shape{o[0], o[1], o[2]}, " for output ", o, ", got ",
             p.lse.shape());
}

}  // namespace detail

// The attention over the union of two disjoint key sets, exactly, from the partials over each
// (see the top of this file). Differentiable in both outputs and both log-sum-exps.
template <class T>
AttentionPartial<T> merge_attention(const AttentionPartial<T>& a, const AttentionPartial<T>& b) {
  detail::check_partial(a, "a");
  detail::check_partial(b, "b");
  ATTN_CHECK(a.output.shape() == b.output.shape(), shape_error,
             "merge_attention: the partials' outputs differ in shape: ", a.output.shape(), " and ",
             b.output.shape());
  Tape<T>& tape = a.output.tape();
  for (const Var<T>* x : {&a.output, &a.lse, &b.output, &b.lse}) tape.check(*x, "merge_attention");
  const Shape& shape = a.output.shape();
  const index_t rows = shape[0] * shape[1] * shape[2], dv = shape[3];
  const bool grad = a.output.requires_grad() || a.lse.requires_grad() || b.output.requires_grad() ||
                    b.lse.requires_grad();
  auto [o, node] = tape.push(shape, "merge_attention", grad);
  node.saved.resize(3);
  node.saved[0].resize(Shape{rows});
  node.saved[1].resize(Shape{rows});
  Tensor<T> lse(Shape{a.lse.shape()});
  const T *xa = a.output.value().data(), *xb = b.output.value().data();
  const T *la = a.lse.value().data(), *lb = b.lse.value().data();
  T* out = node.value->data();
  T* wa = node.saved[0].data();
  T* wb = node.saved[1].data();
  parallel_for(rows, 3.0 * double(dv), [&](index_t r) {
    const SoftmaxPartial<T> pa{la[r], la[r] == negative_infinity<T>() ? T{0} : T{1}};
    const SoftmaxPartial<T> pb{lb[r], lb[r] == negative_infinity<T>() ? T{0} : T{1}};
    const SoftmaxMerged<T> m = merge(pa, pb);
    lse[r] = log_sum_exp(m.state);
    const T l = m.state.sum;
    wa[r] = l == T{0} ? T{0} : m.scale_a * pa.sum / l;
    wb[r] = l == T{0} ? T{0} : m.scale_b * pb.sum / l;
    for (index_t c = 0; c < dv; ++c)
      out[r * dv + c] = wa[r] * xa[r * dv + c] + wb[r] * xb[r * dv + c];
  });
  tape.set_backward(node, detail::MergePartialsOp{a.output.index(), a.lse.index(), b.output.index(),
                                                  b.lse.index(), rows, dv});
  Var<T> merged_lse =
      detail::push_second_output(tape, o, node, 2, lse.shape(), lse.data(), "merge_attention.lse");
  return {o, merged_lse};
}

}  // namespace attn
