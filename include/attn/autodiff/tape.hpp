// attn/autodiff/tape.hpp: the reverse-mode tape. Each operation appends one node holding its
// output tensor and the small state its backward needs; backward() replays the nodes in reverse
// order. Gradient buffers come from a pool: a node gets one when the first contribution to its
// gradient arrives (which writes it instead of adding to zeros) and gives it back once its own
// backward has run, so a pass holds only the gradients in flight, not one per node. clear() keeps
// every buffer, so a training step that records the same operations as the previous one
// allocates nothing.
// Does not build a graph of shared pointers (no per-scalar nodes, no recursion): a node is a
// tensor-sized operation, and the tape is a flat array of them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <new>
#include <string_view>
#include <type_traits>
#include <vector>

#include "../core/error.hpp"
#include "../core/tensor.hpp"

namespace attn {

template <class T>
class Tape;

// A trainable tensor that outlives the tape: its value and the gradient that backward()
// accumulates into (zero it with zero_grad() between optimizer steps).
template <class T>
struct Parameter {
  Tensor<T> value;
  Tensor<T> grad;

  Parameter() = default;
  explicit Parameter(Tensor<T> v) : value(std::move(v)), grad(Tensor<T>::zeros(value.shape())) {}

  void zero_grad() { grad.zero(); }
  const Shape& shape() const { return value.shape(); }
};

// Operation state stored inline in a node must fit in this many bytes (no allocation per node).
inline constexpr std::size_t node_payload_bytes = 1024;

template <class T>
struct Node {
  Tensor<T> own_value;
  Tensor<T> own_grad;             // a buffer from the tape's pool while grad_live, else empty
  Tensor<T>* value = &own_value;  // own_value, or a Parameter's value
  Tensor<T>* grad = &own_grad;    // own_grad, or a Parameter's grad
  bool requires_grad = false;
  bool grad_live = false;   // grad holds this backward pass's values (else it is zero)
  bool grad_freed = false;  // backward ran and gave the buffer back (intermediate results)
  bool external = false;    // value/grad belong to a Parameter
  std::string_view name;    // operation name, for messages
  void (*backward)(Tape<T>&, Node&) = nullptr;
  alignas(std::max_align_t) std::byte payload[node_payload_bytes];
  std::vector<Tensor<T>> saved;           // tensors kept for backward; buffers reused by clear()
  std::vector<std::int32_t> saved_index;  // integer data kept for backward (token ids, targets)
  std::shared_ptr<void> keep;             // an object backward needs that is not trivially copyable
  const void* keep_type = nullptr;        // identifies the type held by `keep`

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // Keeps a copy of `u` alive with the node and returns it. Reuses the held object when it has
  // the same type (copy-assignment), so a steady-state step does not allocate.
  template <class U>
  const U* keep_value(const U& u) {
    static constexpr char tag = 0;
    if (keep_type == &tag && keep) {
      *static_cast<U*>(keep.get()) = u;
    } else {
      keep = std::make_shared<U>(u);
      keep_type = &tag;
    }
    return static_cast<const U*>(keep.get());
  }

  // The operation struct stored by Tape::set_backward.
  template <class Op>
  const Op& op() const {
    return *std::launder(reinterpret_cast<const Op*>(payload));
  }
};

// A handle to a node of a tape: what operations take and return. Cheap to copy. A Var is
// invalidated by Tape::clear(); using it afterwards throws value_error.
template <class T>
class Var {
 public:
  using value_type = T;

  Var() = default;
  Var(Tape<T>* tape, std::int32_t index, std::uint32_t generation)
      : tape_(tape), index_(index), generation_(generation) {}

  // Materialises an elementwise expression into one node (defined in expression.hpp).
  template <class E>
  requires requires { typename E::is_attn_expression; }
  Var(const E& e);  // NOLINT(google-explicit-constructor): lets `Var y = x * w + b;` read naturally

  const Tensor<T>& value() const { return *node().value; }
  const Shape& shape() const { return value().shape(); }
  index_t numel() const { return value().numel(); }
  index_t dim(int axis) const { return shape().dim(axis); }
  bool requires_grad() const { return node().requires_grad; }

  // The gradient of the last backward() with respect to this value (zeros if nothing reached it).
  // Kept for inputs (Tape::leaf) and Parameters; an intermediate result's gradient is released
  // during backward() unless the tape was told to retain it (Tape::set_retain_grads), and asking
  // for it then throws value_error.
  const Tensor<T>& grad() const;

  // The scalar value of a one-element Var.
  T item() const {
    ATTN_CHECK(numel() == 1, shape_error, "Var::item: needs one element, got shape ", shape());
    return value()[0];
  }

  Tape<T>& tape() const {
    ATTN_CHECK(tape_ != nullptr, value_error, "Var: used before it was assigned");
    return *tape_;
  }
  std::int32_t index() const { return index_; }
  std::uint32_t generation() const { return generation_; }
  bool valid() const { return tape_ != nullptr; }

 private:
  Node<T>& node() const;

  Tape<T>* tape_ = nullptr;
  std::int32_t index_ = -1;
  std::uint32_t generation_ = 0;
};

template <class T>
class Tape {
  static_assert(std::is_floating_point_v<T>, "attn: a Tape differentiates float or double tensors");

 public:
  Tape() = default;
  Tape(const Tape&) = delete;
  Tape& operator=(const Tape&) = delete;

  // A constant or input: copies `value` into a node of the tape.
  Var<T> leaf(const Tensor<T>& value, bool requires_grad = false) {
    auto [var, node] = push(value.shape(), "leaf", requires_grad);
    *node.value = value;
    return var;
  }

  // A constant that refers to `value` instead of copying it (no gradient): for large read-only
  // inputs such as a decoding cache. `value` must stay alive and unchanged while the Var is used.
  Var<T> view(const Tensor<T>& value) {
    Node<T>& n = external_node(const_cast<Tensor<T>*>(&value), "view");  // never written
    n.grad = &n.own_grad;
    n.requires_grad = false;
    n.grad_live = false;
    return Var<T>(this, static_cast<std::int32_t>(size_ - 1), generation_);
  }

  // A trainable parameter: the node refers to p's value and accumulates into p.grad.
  Var<T> param(Parameter<T>& p) {
    ATTN_CHECK(p.grad.shape() == p.value.shape(), shape_error, "Tape::param: gradient shape ",
               p.grad.shape(), " differs from value shape ", p.value.shape());
    Node<T>& n = external_node(&p.value, "param");
    n.grad = &p.grad;
    n.requires_grad = grad_enabled_;
    n.grad_live = true;
    return Var<T>(this, static_cast<std::int32_t>(size_ - 1), generation_);
  }

  // Forgets every node (Vars from before become invalid) but keeps their buffers for reuse.
  void clear() {
    for (std::size_t i = 0; i < size_; ++i) release_grad(*nodes_[i]);
    size_ = 0;
    ++generation_;
  }

  // Keep the gradients of intermediate results after backward() (for inspection and tests), at
  // the cost of one gradient buffer per node. Off by default.
  void set_retain_grads(bool on) { retain_grads_ = on; }
  bool retain_grads() const { return retain_grads_; }

  // Number of nodes recorded since the last clear().
  std::size_t size() const { return size_; }

  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }

  // Back-propagates from the one-element `loss`: its gradient is set to 1 and every node that
  // depends on a Var with requires_grad receives d loss / d node. Parameters accumulate.
  void backward(const Var<T>& loss) {
    check(loss, "backward");
    ATTN_CHECK(loss.numel() == 1, shape_error,
               "backward: the loss must have one element, got shape ", loss.shape());
    ATTN_CHECK(loss.requires_grad(), value_error,
               "backward: the loss does not depend on anything that requires a gradient");
    for (std::size_t i = 0; i < size_; ++i) {
      release_grad(*nodes_[i]);
      nodes_[i]->grad_freed = false;
    }
    grad(loss.index())[0] += T{1};
    for (auto i = static_cast<std::int64_t>(loss.index()); i >= 0; --i) {
      Node<T>& n = *nodes_[static_cast<std::size_t>(i)];
      if (n.requires_grad && n.grad_live && n.backward != nullptr) {
        n.backward(*this, n);
        // Nothing reads this gradient again: every contribution came from later nodes.
        if (!retain_grads_) {
          release_grad(n);
          n.grad_freed = true;
        }
      }
    }
  }

  // ---- for operation authors -----------------------------------------------------------------

  // Appends a node whose value has `shape` (contents unspecified: the operation writes them).
  struct Pushed {
    Var<T> var;
    Node<T>& node;
  };
  Pushed push(const Shape& shape, std::string_view name, bool requires_grad) {
    Node<T>& n = next_node();
    n.value = &n.own_value;
    n.grad = &n.own_grad;
    n.external = false;
    n.requires_grad = requires_grad && grad_enabled_;
    n.grad_live = false;
    n.grad_freed = false;
    n.name = name;
    n.backward = nullptr;
    n.own_value.resize(shape);
    return {Var<T>(this, static_cast<std::int32_t>(size_ - 1), generation_), n};
  }

  // Stores `op` in the node and makes op.backward(tape, node) its backward step. Op must be
  // trivially copyable (indices and scalars, no owning members) and fit in the payload.
  template <class Op>
  void set_backward(Node<T>& n, const Op& op) {
    static_assert(std::is_trivially_copyable_v<Op>,
                  "attn: an operation's saved state must be trivially copyable");
    static_assert(sizeof(Op) <= node_payload_bytes && alignof(Op) <= alignof(std::max_align_t),
                  "attn: this elementwise expression is too large to fuse into one node; "
                  "materialise part of it first (assign it to a Var)");
    if (!n.requires_grad) return;
    ::new (static_cast<void*>(n.payload)) Op(op);
    n.backward = [](Tape& tape, Node<T>& node) { node.template op<Op>().backward(tape, node); };
  }

  Node<T>& node(std::int32_t index) { return *nodes_[static_cast<std::size_t>(index)]; }
  const Tensor<T>& value(std::int32_t index) const {
    return *nodes_[static_cast<std::size_t>(index)]->value;
  }
  bool requires_grad(std::int32_t index) const {
    return nodes_[static_cast<std::size_t>(index)]->requires_grad;
  }

  // The gradient buffer of node `index` for accumulation (+=): zeroed on first use in a pass.
  // Operations that write every element should use grad_write() instead, which skips the zeros.
  Tensor<T>& grad(std::int32_t index) {
    Node<T>& n = *nodes_[static_cast<std::size_t>(index)];
    ATTN_CHECK(!n.grad_freed, value_error, "the gradient of '", n.name,
               "' (an intermediate result) was released during backward(); call "
               "Tape::set_retain_grads(true) before backward() to keep it");
    if (!n.grad_live) {
      acquire_grad(n);
      n.grad->zero();
    }
    return *n.grad;
  }

  // Where an operation's backward writes its contribution to node `index`'s gradient: `data`
  // holds numel elements; when `accumulate` is false this is the first contribution of the pass
  // and the operation must overwrite every element (the buffer holds garbage, not zeros);
  // otherwise it adds. Parameters always accumulate.
  struct GradWrite {
    T* data;
    bool accumulate;
  };
  GradWrite grad_write(std::int32_t index) {
    Node<T>& n = *nodes_[static_cast<std::size_t>(index)];
    if (n.grad_live) return {n.grad->data(), true};
    acquire_grad(n);
    return {n.grad->data(), false};
  }

  // Gives node `to` the gradient buffer of node `from` (whose backward is running) as its first
  // contribution, without copying: for operations whose gradient passes through unchanged in the
  // same element order (reshape). False, and nothing done, when `to` already has a gradient, is
  // a Parameter, `from` does not own its buffer, or gradients are retained (`from` keeps its own).
  bool pass_grad(Node<T>& from, std::int32_t to) {
    Node<T>& n = *nodes_[static_cast<std::size_t>(to)];
    if (retain_grads_ || n.grad_live || n.external || from.external || !from.grad_live ||
        from.own_grad.numel() != n.value->numel())
      return false;
    n.own_grad = std::move(from.own_grad);  // leaves `from` an empty tensor
    n.own_grad.reshape(n.value->shape());
    n.grad_live = true;
    from.grad_live = false;
    return true;
  }

  // Throws value_error when `v` does not belong to this tape's current generation.
  void check(const Var<T>& v, std::string_view op) const {
    ATTN_CHECK(v.valid(), value_error, op, ": an operand is an unassigned Var");
    ATTN_CHECK(&v.tape() == this, value_error, op, ": operands come from different tapes");
    ATTN_CHECK(v.generation() == generation_, value_error, op,
               ": an operand is a Var from before Tape::clear(); recompute it");
  }

  std::uint32_t generation() const { return generation_; }

 private:
  Node<T>& next_node() {
    if (size_ == nodes_.size()) nodes_.push_back(std::make_unique<Node<T>>());
    return *nodes_[size_++];
  }

  // A node whose value lives outside the tape (a Parameter's, or a viewed tensor).
  Node<T>& external_node(Tensor<T>* value, std::string_view name) {
    Node<T>& n = next_node();
    n.value = value;
    n.external = true;
    n.grad_freed = false;
    n.name = name;
    n.backward = nullptr;
    return n;
  }

  // Gives n a gradient buffer of its value's size (contents unspecified) from the pool: one of
  // exactly that many elements, or a new one. Exact sizes only: a step that records the same
  // operations as the previous one then finds every buffer it needs, whatever order they come
  // back in, and never allocates.
  void acquire_grad(Node<T>& n) {
    const index_t count = n.value->numel();
    for (std::size_t i = 0; i < free_grads_.size(); ++i)
      if (free_grads_[i].capacity() == count) {
        n.own_grad = std::move(free_grads_[i]);
        free_grads_[i] = std::move(free_grads_.back());
        free_grads_.pop_back();
        break;
      }
    n.own_grad.resize(n.value->shape());  // allocates only when nothing fitted
    n.grad = &n.own_grad;
    n.grad_live = true;
  }

  // Returns n's gradient buffer to the pool (Parameters keep theirs).
  void release_grad(Node<T>& n) {
    if (n.external) return;
    n.grad_live = false;
    if (n.own_grad.capacity() > 0) free_grads_.push_back(std::move(n.own_grad));
  }

  std::vector<std::unique_ptr<Node<T>>> nodes_;
  std::vector<Tensor<T>> free_grads_;  // gradient buffers not attached to a node
  std::size_t size_ = 0;
  std::uint32_t generation_ = 0;
  bool grad_enabled_ = true;
  bool retain_grads_ = false;
};

// Disables recording of backward state on a tape for its lifetime (evaluation, sampling).
template <class T>
class NoGrad {
 public:
  explicit NoGrad(Tape<T>& tape) : tape_(tape), was_(tape.grad_enabled()) {
    tape_.set_grad_enabled(false);
  }
  ~NoGrad() { tape_.set_grad_enabled(was_); }
  NoGrad(const NoGrad&) = delete;
  NoGrad& operator=(const NoGrad&) = delete;

 private:
  Tape<T>& tape_;
  bool was_;
};

template <class T>
Node<T>& Var<T>::node() const {
  Tape<T>& t = tape();
  t.check(*this, "Var");
  return t.node(index_);
}

template <class T>
const Tensor<T>& Var<T>::grad() const {
  node();  // validity check
  return tape().grad(index_);
}

}  // namespace attn
