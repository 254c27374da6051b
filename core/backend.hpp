// The model math behind one interface: the operations a dense or convolutional model, its
// optimizer and the mixing step need, so that Model (model.hpp), Optimizer (optimizer.hpp) and Trainer
// (trainer.hpp) run the same code on the CPU (CpuBackend: Eigen and plain loops, the default)
// or on a GPU (gpu/cuda_backend.hpp: cuBLAS sgemm and small CUDA kernels, built only where
// nvcc exists). core/ itself never touches a GPU: a device backend is handed in from outside.
//
// Contract of every operation:
// - Pointers are in the backend's memory (plain host memory for the CPU, device memory for
//   CUDA), from allocate() or a Buffer, unless the name says host.
// - Operations run in the order they are called. On a device they are queued on the backend's
//   one stream and return before they finish; download(), synchronize() and every operation
//   that returns a value wait for everything queued before them. On the CPU they finish before
//   returning.
// - Matrices are row-major. gemm: C (m x n) = op(A) op(B), op(A) m x k, op(B) k x n; A is
//   stored k x m when trans_a (and B n x k when trans_b).
// - Results on a device agree with the CPU's to rounding (different summation orders), except
//   mix(), which is exact: x + w (m - s) rounded after each operation, as on the CPU, and the
//   pure data movement of im2col, the pooling and the gathers, which is exact too.
// - Images are NHWC: a batch of B images of H x W pixels with C channels is B*H*W*C floats,
//   channel fastest, so a convolution is im2col then one GEMM whose result (B*OH*OW x filters)
//   is already the next NHWC activation (see ConvShape).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace rumor {

// The coefficients of one optimizer update, worked out on the host by Optimizer::step.
struct SgdUpdate {
  float lr = 0, weight_decay = 0, momentum = 0;
  bool nesterov = false;  // velocity == nullptr: plain SGD, no momentum
};
struct AdamUpdate {
  float step = 0;          // lr / (1 - beta1^t)
  float inv_sqrt_bc2 = 1;  // 1 / sqrt(1 - beta2^t)
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f, weight_decay = 0;
  float decay = 1;         // AdamW: 1 - lr * weight_decay; Adam: 1
  bool decoupled = false;  // AdamW
};

// One 2-D convolution's geometry: an in_h x in_w x in_c input (NHWC), a kernel x kernel window
// moved by `stride`, `pad` zero pixels on every side. Its im2col matrix has one row per output
// pixel (B*out_h*out_w rows, in image order) and patch() = kernel*kernel*in_c columns ordered
// (kh, kw, c), which is also the row order of the filter matrix (patch() x filters).
struct ConvShape {
  std::size_t in_h = 0, in_w = 0, in_c = 0, kernel = 1, stride = 1, pad = 0;
  std::size_t out_h() const { return (in_h + 2 * pad - kernel) / stride + 1; }
  std::size_t out_w() const { return (in_w + 2 * pad - kernel) / stride + 1; }
  std::size_t patch() const { return kernel * kernel * in_c; }
};

// Max pooling over non-overlapping window x window tiles (stride = window), NHWC; rows and
// columns past the last whole tile are dropped (floor), as in PyTorch's default.
struct PoolShape {
  std::size_t in_h = 0, in_w = 0, c = 0, window = 2;
  std::size_t out_h() const { return in_h / window; }
  std::size_t out_w() const { return in_w / window; }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;  // "cpu", "cuda:0 (NVIDIA H200)"
  // True when buffers are plain host memory, so host data can be used where backend memory
  // is expected (the CPU): no copies at all.
  virtual bool host_memory() const = 0;

  // ---- memory
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void deallocate(void* p) noexcept = 0;
  // Host memory the backend copies from and to fastest (CUDA: pinned). Any host memory works
  // with upload/download; this kind lets them run without a staging copy.
  virtual void* allocate_host(std::size_t bytes) = 0;
  virtual void deallocate_host(void* p) noexcept = 0;
  // host -> backend. `src` must stay unchanged until the backend next waits (download,
  // synchronize, or an operation returning a value).
  virtual void upload(void* dst, const void* src_host, std::size_t bytes) = 0;
  // backend -> host; waits for everything queued before it and for the copy.
  virtual void download(void* dst_host, const void* src, std::size_t bytes) = 0;
  virtual void synchronize() = 0;

  // ---- the model's forward and backward pass
  virtual void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
                    const float* b, float* c) = 0;
  // z (rows x cols) += bias (per column), then max(z, 0) when `relu`.
  virtual void bias_activation(float* z, const float* bias, std::size_t rows, std::size_t cols, bool relu) = 0;
  // delta[i] = act[i] > 0 ? delta[i] : 0 (ReLU's derivative read off its output).
  virtual void relu_backward(float* delta, const float* act, std::size_t n) = 0;
  // out (cols) = sum over rows of d (rows x cols): the gradient of a bias.
  virtual void column_sum(const float* d, std::size_t rows, std::size_t cols, float* out) = 0;
  // Softmax cross-entropy over logits z (rows x classes): delta = (softmax(z) - onehot) / rows;
  // returns the mean loss (waits). Labels are in [0, classes): callers check.
  virtual double softmax_cross_entropy(const float* z, const std::int32_t* labels, std::size_t rows,
                                       std::size_t classes, float* delta) = 0;
  // Mean squared error 0.5 |z - t|^2 per row: delta = (z - t) / rows; returns the mean loss.
  virtual double squared_error(const float* z, const float* targets, std::size_t rows, std::size_t cols,
                               float* delta) = 0;
  // dst row i = src row idx[i] (rows x dim floats); labels likewise when both are non-null.
  virtual void gather_rows(const float* src, const std::int32_t* idx, std::size_t rows, std::size_t dim,
                           float* dst) = 0;
  virtual void gather_labels(const std::int32_t* src, const std::int32_t* idx, std::size_t rows,
                             std::int32_t* dst) = 0;

  // ---- convolution and pooling (NHWC, see ConvShape and PoolShape)
  // col ((batch*out_h*out_w) x patch()) = the input's patches, zeros where they cross the padding.
  virtual void im2col(const float* x, std::size_t batch, const ConvShape& s, float* col) = 0;
  // The adjoint: x (batch images, overwritten) = the sum of every patch's entries back where
  // im2col read them (the input gradient of a convolution from its patch gradient).
  virtual void col2im(const float* col, std::size_t batch, const ConvShape& s, float* x) = 0;
  // y (batch x out_h x out_w x c) = each tile's maximum; argmax = the winning input's offset
  // within its image ((h*in_w + w)*c + channel), the first in row-major order on ties.
  virtual void maxpool_forward(const float* x, std::size_t batch, const PoolShape& s, float* y,
                               std::int32_t* argmax) = 0;
  // dx (batch input images, overwritten) = dy routed to each tile's winner, zero elsewhere.
  virtual void maxpool_backward(const float* dy, const std::int32_t* argmax, std::size_t batch,
                                const PoolShape& s, float* dx) = 0;

  // ---- optimizer updates, one pass over n parameters
  virtual void sgd_update(float* params, const float* grad, float* velocity, std::size_t n, const SgdUpdate& u) = 0;
  virtual void adam_update(float* params, const float* grad, float* m, float* v, std::size_t n,
                           const AdamUpdate& u) = 0;
  // ---- mixing: x += w (m - snap), exactly as mix_into (mix.hpp) does on the host.
  virtual void mix(float* x, const float* m, const float* snap, std::size_t n, float w) = 0;
};

// Eigen's GEMM and plain loops, single stream = the calling thread; stateless.
class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }
  bool host_memory() const override { return true; }
  void* allocate(std::size_t bytes) override;
  void deallocate(void* p) noexcept override;
  void* allocate_host(std::size_t bytes) override { return allocate(bytes); }
  void deallocate_host(void* p) noexcept override { deallocate(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override {}
  void gemm(bool trans_a, bool trans_b, std::size_t m, std::size_t n, std::size_t k, const float* a,
            const float* b, float* c) override;
  void bias_activation(float* z, const float* bias, std::size_t rows, std::size_t cols, bool relu) override;
  void relu_backward(float* delta, const float* act, std::size_t n) override;
  void column_sum(const float* d, std::size_t rows, std::size_t cols, float* out) override;
  double softmax_cross_entropy(const float* z, const std::int32_t* labels, std::size_t rows, std::size_t classes,
                               float* delta) override;
  double squared_error(const float* z, const float* targets, std::size_t rows, std::size_t cols,
                       float* delta) override;
  void gather_rows(const float* src, const std::int32_t* idx, std::size_t rows, std::size_t dim,
                   float* dst) override;
  void gather_labels(const std::int32_t* src, const std::int32_t* idx, std::size_t rows,
                     std::int32_t* dst) override;
  void im2col(const float* x, std::size_t batch, const ConvShape& s, float* col) override;
  void col2im(const float* col, std::size_t batch, const ConvShape& s, float* x) override;
  void maxpool_forward(const float* x, std::size_t batch, const PoolShape& s, float* y,
                       std::int32_t* argmax) override;
  void maxpool_backward(const float* dy, const std::int32_t* argmax, std::size_t batch, const PoolShape& s,
                        float* dx) override;
  void sgd_update(float* params, const float* grad, float* velocity, std::size_t n, const SgdUpdate& u) override;
  void adam_update(float* params, const float* grad, float* m, float* v, std::size_t n,
                   const AdamUpdate& u) override;
  void mix(float* x, const float* m, const float* snap, std::size_t n, float w) override;
};

std::shared_ptr<Backend> make_cpu_backend();

// The CPU's math behind a device's memory model: its own buffers, every transfer a copy, and
// host_memory() false, so a Trainer or Model on it takes the device path (resident state, the
// host mirror of the parameters, params_written()) on any machine. For tests, and for
// `rumor-peer --device emulated`, which runs a GPU peer's data flow without a GPU.
class EmulatedDevice final : public Backend {
 public:
  std::string name() const override { return "emulated"; }
  bool host_memory() const override { return false; }
  void* allocate(std::size_t bytes) override { return cpu_.allocate(bytes); }
  void deallocate(void* p) noexcept override { cpu_.deallocate(p); }
  void* allocate_host(std::size_t bytes) override { return cpu_.allocate(bytes); }
  void deallocate_host(void* p) noexcept override { cpu_.deallocate(p); }
  void upload(void* dst, const void* src, std::size_t bytes) override;
  void download(void* dst, const void* src, std::size_t bytes) override;
  void synchronize() override {}
  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b,
            float* c) override {
    cpu_.gemm(ta, tb, m, n, k, a, b, c);
  }
  void bias_activation(float* z, const float* b, std::size_t r, std::size_t c, bool relu) override {
    cpu_.bias_activation(z, b, r, c, relu);
  }
  void relu_backward(float* d, const float* a, std::size_t n) override { cpu_.relu_backward(d, a, n); }
  void column_sum(const float* d, std::size_t r, std::size_t c, float* o) override { cpu_.column_sum(d, r, c, o); }
  double softmax_cross_entropy(const float* z, const std::int32_t* y, std::size_t r, std::size_t c,
                               float* d) override {
    return cpu_.softmax_cross_entropy(z, y, r, c, d);
  }
  double squared_error(const float* z, const float* t, std::size_t r, std::size_t c, float* d) override {
    return cpu_.squared_error(z, t, r, c, d);
  }
  void gather_rows(const float* s, const std::int32_t* i, std::size_t r, std::size_t d, float* o) override {
    cpu_.gather_rows(s, i, r, d, o);
  }
  void gather_labels(const std::int32_t* s, const std::int32_t* i, std::size_t r, std::int32_t* o) override {
    cpu_.gather_labels(s, i, r, o);
  }
  void im2col(const float* x, std::size_t b, const ConvShape& s, float* col) override { cpu_.im2col(x, b, s, col); }
  void col2im(const float* col, std::size_t b, const ConvShape& s, float* x) override { cpu_.col2im(col, b, s, x); }
  void maxpool_forward(const float* x, std::size_t b, const PoolShape& s, float* y, std::int32_t* am) override {
    cpu_.maxpool_forward(x, b, s, y, am);
  }
  void maxpool_backward(const float* dy, const std::int32_t* am, std::size_t b, const PoolShape& s,
                        float* dx) override {
    cpu_.maxpool_backward(dy, am, b, s, dx);
  }
  void sgd_update(float* p, const float* g, float* v, std::size_t n, const SgdUpdate& u) override {
    cpu_.sgd_update(p, g, v, n, u);
  }
  void adam_update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamUpdate& u) override {
    cpu_.adam_update(p, g, m, v, n, u);
  }
  void mix(float* x, const float* m, const float* s, std::size_t n, float w) override { cpu_.mix(x, m, s, n, w); }

  std::size_t uploaded_bytes = 0, downloaded_bytes = 0;  // what crossed "the bus"

 private:
  CpuBackend cpu_;
};

// n values of T in a backend's memory (RAII, move-only). Grows with reserve(); never shrinks.
template <class T>
class Buffer {
 public:
  Buffer() = default;
  Buffer(Backend& be, std::size_t n) : be_(&be) { reserve(n); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer t(std::move(o));
    swap(t);
    return *this;
  }
  ~Buffer() {
    if (be_ && p_) be_->deallocate(p_);
  }
  void bind(Backend& be) { be_ = &be; }
  // Capacity for at least n values; old contents are not kept when it grows.
  void reserve(std::size_t n) {
    if (n <= n_) return;
    if (p_) be_->deallocate(p_);
    p_ = nullptr;
    n_ = 0;
    p_ = static_cast<T*>(be_->allocate(n * sizeof(T)));
    n_ = n;
  }
  void upload(std::span<const T> host) {
    reserve(host.size());
    if (!host.empty()) be_->upload(p_, host.data(), host.size_bytes());
  }
  void download(std::span<T> host) const {
    if (!host.empty()) be_->download(host.data(), p_, host.size_bytes());
  }
  T* data() { return p_; }
  const T* data() const { return p_; }
  std::size_t capacity() const { return n_; }

 private:
  void swap(Buffer& o) noexcept {
    std::swap(be_, o.be_);
    std::swap(p_, o.p_);
    std::swap(n_, o.n_);
  }
  Backend* be_ = nullptr;
  T* p_ = nullptr;
  std::size_t n_ = 0;
};

}  // namespace rumor
