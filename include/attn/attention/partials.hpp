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
// lse = −∞ and passes no gradient. Attention sinks (attention_sink, below) are the merge with a
// part that has a learned log-sum-exp and no value. Does not compute attention itself: the
// fused kernel gives a partial (online_softmax_attention_partial, Attention::partial).
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

// One row's merge of two parts with log-sum-exps la, lb (the partial outputs' weights w_a, w_b
// and the merged log-sum-exp), by online_softmax_merge.hpp's merge.
template <class T>
struct RowMerge {
  T lse, wa, wb;
};
template <class T>
RowMerge<T> merge_row(T la, T lb) {
  const SoftmaxPartial<T> pa{la, la == negative_infinity<T>() ? T{0} : T{1}};
  const SoftmaxPartial<T> pb{lb, lb == negative_infinity<T>() ? T{0} : T{1}};
  const SoftmaxMerged<T> m = merge(pa, pb);
  const T l = m.state.sum;
  if (l == T{0}) return {negative_infinity<T>(), T{0}, T{0}};
  return {log_sum_exp(m.state), m.scale_a * pa.sum / l, m.scale_b * pb.sum / l};
}

struct AttentionSinkOp {
  std::int32_t o, lse, sinks;
  index_t B, H, Tq, Dv;
  // self.saved[0]: each row's share of the sink logits' gradient, before the sum over rows;
  // self.saved[1]: dlse', when the sunk log-sum-exp was used.
  template <class T>
  void backward(Tape<T>& tape, Node<T>& self) const {
    const T* dlse = take_second_gradient(self, 1);
    const T* out = self.value->data();
    const T* dout = self.grad->data();
    const T* x = tape.value(o).data();
    const T* lv = tape.value(lse).data();
    const T* sv = tape.value(sinks).data();
    T* go = tape.requires_grad(o) ? tape.grad(o).data() : nullptr;
    T* gl = tape.requires_grad(lse) ? tape.grad(lse).data() : nullptr;
    self.saved[0].resize(Shape{B * H * Tq});
    T* per_row = self.saved[0].data();
    parallel_for(B * H * Tq, 6.0 * double(Dv), [&](index_t r) {
      const RowMerge<T> m = merge_row(lv[r], sv[(r / Tq) % H]);
      const T* d = dout + r * Dv;
      T dx = dlse ? dlse[r] : T{0}, ds = dx;  // dlse' + dO'·(o − o'), dlse' + dO'·(0 − o')
      for (index_t c = 0; c < Dv; ++c) {
        dx += d[c] * (x[r * Dv + c] - out[r * Dv + c]);
        ds -= d[c] * out[r * Dv + c];
      }
      if (go)
        for (index_t c = 0; c < Dv; ++c) go[r * Dv + c] += m.wa * d[c];
      if (gl) gl[r] += m.wa * dx;
      per_row[r] = m.wb * ds;
    });
    if (!tape.requires_grad(sinks)) return;
    // dσ_h sums the rows of head h in one order: the same bits for any thread count.
    T* gs = tape.grad(sinks).data();
    for (index_t h = 0; h < H; ++h) {
      T sum = 0;
      for (index_t b = 0; b < B; ++b)
        for (index_t i = 0; i < Tq; ++i) sum += per_row[(b * H + h) * Tq + i];
      gs[h] += sum;
    }
  }
};

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
void check_partial(const AttentionPartial<T>& p, const char* which,
                   const char* op = "merge_attention") {
  ATTN_CHECK(p.output.valid() && p.lse.valid(), value_error, op, ": partial ", which,
             " has an unassigned output or lse");
  const Shape& o = p.output.shape();
  ATTN_CHECK(o.rank() == 4, shape_error, op, ": partial ", which,
             " output must be [B, H, Tq, Dv], got ", o);
  ATTN_CHECK(p.lse.shape() == (Shape{o[0], o[1], o[2]}), shape_error, op, ": partial ", which,
             " lse must be ", Shape{o[0], o[1], o[2]}, " for output ", o, ", got ", p.lse.shape());
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
    const detail::RowMerge<T> m = detail::merge_row(la[r], lb[r]);
    lse[r] = m.lse;
    wa[r] = m.wa;
    wb[r] = m.wb;
    for (index_t c = 0; c < dv; ++c)
      out[r * dv + c] = wa[r] * xa[r * dv + c] + wb[r] * xb[r * dv + c];
  });
  tape.set_backward(node, detail::MergePartialsOp{a.output.index(), a.lse.index(), b.output.index(),
                                                  b.lse.index(), rows, dv});
  Var<T> merged_lse =
      detail::push_second_output(tape, o, node, 2, lse.shape(), lse.data(), "merge_attention.lse");
  return {o, merged_lse};
}

// Attention sinks: head h's logit σ_h (sinks [H]) joins the softmax denominator of every row of
// that head and brings no value,
//     o'_i = Σ_j e^{s_ij} v_j / (e^{σ_h} + Σ_j e^{s_ij}),   lse'_i = log(e^{σ_h} + Σ_j e^{s_ij}),
// so a head can put weight nowhere (a learned "no-op"), as the learned sink of Xiao, Tian, Chen,
// Han and Lewis, "Efficient Streaming Language Models with Attention Sinks", and the per-head
// sink logits of recent open-weight models. It is the merge with a part that has log-sum-exp
// σ_h and output 0, done in place. A fixed sink σ = 0 is softmax₁ (Miller, "Attention Is Off By
// One"): zero_sinks(). Differentiable in p and in the sinks (their gradient summed over the
// rows of each head in a fixed order). A row with no allowed key stays 0 and gives q, k, v no
// gradient; its lse' is σ_h.
template <class T>
AttentionPartial<T> attention_sink(const AttentionPartial<T>& p, const Var<T>& sinks) {
  detail::check_partial(p, "p", "attention_sink");
  const Shape& shape = p.output.shape();
  const index_t B = shape[0], H = shape[1], Tq = shape[2], Dv = shape[3];
  ATTN_CHECK(sinks.valid(), value_error, "attention_sink: the sinks are an unassigned Var");
  ATTN_CHECK(sinks.shape() == (Shape{H}), shape_error, "attention_sink: sinks must be [", H,
             "] (one logit per head) for output ", shape, ", got ", sinks.shape());
  Tape<T>& tape = p.output.tape();
  for (const Var<T>* x : {&p.output, &p.lse, &sinks}) tape.check(*x, "attention_sink");
  const bool grad = p.output.requires_grad() || p.lse.requires_grad() || sinks.requires_grad();
  auto [o, node] = tape.push(shape, "attention_sink", grad);
  node.saved.resize(2);
  Tensor<T> lse(p.lse.shape());
  const T *x = p.output.value().data(), *lv = p.lse.value().data(), *sv = sinks.value().data();
  T* out = node.value->data();
  parallel_for(B * H * Tq, 2.0 * double(Dv), [&](index_t r) {
    const detail::RowMerge<T> m = detail::merge_row(lv[r], sv[(r / Tq) % H]);
    lse[r] = m.lse;
    for (index_t c = 0; c < Dv; ++c) out[r * Dv + c] = m.wa * x[r * Dv + c];
  });
  tape.set_backward(
      node, detail::AttentionSinkOp{p.output.index(), p.lse.index(), sinks.index(), B, H, Tq, Dv});
  return {o, detail::push_second_output(tape, o, node, 1, lse.shape(), lse.data(),
                                        "attention_sink.lse")};
}

// softmax₁: attention_sink with every sink logit 0 (not trained).
template <class T>
AttentionPartial<T> zero_sinks(const AttentionPartial<T>& p) {
  detail::check_partial(p, "p", "zero_sinks");
  return attention_sink(p, p.output.tape().leaf(Tensor<T>(Shape{p.output.shape()[1]})));
}

}  // namespace attn
