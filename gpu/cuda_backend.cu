// The CUDA backend (gpu/cuda_backend.hpp): core/backend.hpp's operations on one device.
//
// - Products: cublasSgemm in FP32 (CUBLAS_DEFAULT_MATH: no TF32, so results agree with the
//   CPU's to FP32 rounding). Row-major C = op(A) op(B) is the column-major C^T = op(B)^T op(A)^T,
//   so the operands are passed swapped. Bias gradients are a gemv with a vector of ones.
// - Everything else: one small grid-stride kernel per operation (bias + ReLU, ReLU backward,
//   softmax cross-entropy and squared error with one thread per row, gathers, SGD and Adam
//   updates, mixing).
// - Convolutions and pooling (NHWC): im2col with one thread per patch entry; col2im as a
//   gather, one thread per input value summing the patch entries that read it (no atomics),
//   in the order the CPU adds them (output pixels in image order); max pooling with one
//   thread per output value (the first maximum wins, as on the CPU) and its backward with one
//   thread per input value (tiles do not overlap, so each input has at most one source).
// - One non-blocking stream; every call is queued on it. Only download(), synchronize() and
//   the losses (which return a value) wait. The per-row losses come back in pinned memory and
//   are summed on the host in double, in row order, as the CPU does.
// - mix() is exact: the CPU's mix_into is compiled either with the multiply-add contracted
//   into an FMA (GCC's default for C++ where the CPU has FMA) or not; the constructor probes
//   which on this host and the kernel rounds the same way (__fmaf_rn, or __fmul_rn then
//   __fadd_rn), so a GPU peer and a CPU peer on the same machine mix bit-identically.
//
// Errors: a failing CUDA or cuBLAS call throws std::runtime_error naming the call, file:line
// and the runtime's reason.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "core/mix.hpp"
#include "core/rng.hpp"
#include "gpu/cuda_backend.hpp"

namespace rumor::gpu {
namespace {

[[noreturn]] void fail(const char* what, const char* file, int line, const std::string& why) {
  throw std::runtime_error(std::string(file) + ":" + std::to_string(line) + ": " + what + " failed: " + why);
}
#define CUDA_CHECK(call)                                                   \
  do {                                                                     \
    const cudaError_t e_ = (call);                                         \
    if (e_ != cudaSuccess) fail(#call, __FILE__, __LINE__, cudaGetErrorString(e_)); \
  } while (0)
#define CUBLAS_CHECK(call)                                                 \
  do {                                                                     \
    const cublasStatus_t s_ = (call);                                      \
    if (s_ != CUBLAS_STATUS_SUCCESS) fail(#call, __FILE__, __LINE__, cublasGetStatusString(s_)); \
  } while (0)

constexpr int kThreads = 256;
unsigned blocks_for(std::size_t n) {
  const std::size_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 8 ? (b ? b : 1) : 65535 * 8);  // grid-stride beyond
}
#define GRID_STRIDE(i, n) \
  for (std::size_t i = blockIdx.x * std::size_t(blockDim.x) + threadIdx.x; i < (n); i += std::size_t(blockDim.x) * gridDim.x)

__global__ void bias_activation_k(float* z, const float* bias, std::size_t rows, std::size_t cols, bool relu) {
  GRID_STRIDE(i, rows * cols) {
    const float v = z[i] + bias[i % cols];
    z[i] = relu ? fmaxf(v, 0.0f) : v;
  }
}

__global__ void relu_backward_k(float* d, const float* a, std::size_t n) {
  GRID_STRIDE(i, n) d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

__global__ void softmax_xent_k(const float* z, const std::int32_t* labels, std::size_t rows, std::size_t C,
                               float inv_b, float* delta, double* row_loss) {
  GRID_STRIDE(i, rows) {
    const float* zi = z + i * C;
    float* g = delta + i * C;
    float m = zi[0];
    for (std::size_t c = 1; c < C; ++c) m = fmaxf(m, zi[c]);
    float se = 0;
    for (std::size_t c = 0; c < C; ++c) {
      g[c] = expf(zi[c] - m);
      se += g[c];
    }
    const float inv = 1.0f / se;
    for (std::size_t c = 0; c < C; ++c) g[c] *= inv * inv_b;
    const std::int32_t y = labels[i];
    g[y] -= inv_b;
    row_loss[i] = log(static_cast<double>(se)) - static_cast<double>(zi[y] - m);
  }
}

__global__ void squared_error_k(const float* z, const float* t, std::size_t rows, std::size_t C, float inv_b,
                                float* delta, double* row_loss) {
  GRID_STRIDE(i, rows) {
    double loss = 0;
    for (std::size_t c = 0; c < C; ++c) {
      const float e = z[i * C + c] - t[i * C + c];
      delta[i * C + c] = e * inv_b;
      loss += 0.5 * static_cast<double>(e) * e;
    }
    row_loss[i] = loss;
  }
}

__global__ void gather_rows_k(const float* src, const std::int32_t* idx, std::size_t rows, std::size_t dim,
                              float* dst) {
  GRID_STRIDE(i, rows * dim) {
    const std::size_t r = i / dim, c = i % dim;
    dst[i] = src[static_cast<std::size_t>(idx[r]) * dim + c];
  }
}

__global__ void gather_labels_k(const std::int32_t* src, const std::int32_t* idx, std::size_t rows,
                                std::int32_t* dst) {
  GRID_STRIDE(i, rows) dst[i] = src[idx[i]];
}

__global__ void im2col_k(const float* x, std::size_t batch, ConvShape s, std::size_t OH, std::size_t OW, float* col) {
  const std::size_t P = s.kernel * s.kernel * s.in_c;
  GRID_STRIDE(i, batch * OH * OW * P) {
    const std::size_t row = i / P, j = i % P;
    const std::size_t c = j % s.in_c, kw = (j / s.in_c) % s.kernel, kh = j / (s.in_c * s.kernel);
    const std::size_t ow = row % OW, oh = (row / OW) % OH, b = row / (OW * OH);
    const long long ih = static_cast<long long>(oh * s.stride + kh) - static_cast<long long>(s.pad);
    const long long iw = static_cast<long long>(ow * s.stride + kw) - static_cast<long long>(s.pad);
    col[i] = (ih < 0 || iw < 0 || ih >= static_cast<long long>(s.in_h) || iw >= static_cast<long long>(s.in_w))
                 ? 0.0f
                 : x[((b * s.in_h + static_cast<std::size_t>(ih)) * s.in_w + static_cast<std::size_t>(iw)) * s.in_c + c];
  }
}

__global__ void col2im_k(const float* col, std::size_t batch, ConvShape s, std::size_t OH, std::size_t OW, float* x) {
  const std::size_t K = s.kernel, C = s.in_c, P = K * K * C;
  GRID_STRIDE(i, batch * s.in_h * s.in_w * C) {
    const std::size_t c = i % C, iw = (i / C) % s.in_w, ih = (i / (C * s.in_w)) % s.in_h, b = i / (C * s.in_w * s.in_h);
    float sum = 0.0f;
    // Output pixels in image order = kernel taps in reverse: the CPU's order of additions.
    for (std::size_t kh1 = K; kh1-- > 0;) {
      const long long th = static_cast<long long>(ih + s.pad) - static_cast<long long>(kh1);
      if (th < 0 || th % static_cast<long long>(s.stride)) continue;
      const std::size_t oh = static_cast<std::size_t>(th) / s.stride;
      if (oh >= OH) continue;
      for (std::size_t kw1 = K; kw1-- > 0;) {
        const long long tw = static_cast<long long>(iw + s.pad) - static_cast<long long>(kw1);
        if (tw < 0 || tw % static_cast<long long>(s.stride)) continue;
        const std::size_t ow = static_cast<std::size_t>(tw) / s.stride;
        if (ow >= OW) continue;
        sum += col[((b * OH + oh) * OW + ow) * P + (kh1 * K + kw1) * C + c];
      }
    }
    x[i] = sum;
  }
}

__global__ void maxpool_forward_k(const float* x, std::size_t batch, PoolShape s, std::size_t OH, std::size_t OW,
                                  float* y, std::int32_t* argmax) {
  const std::size_t K = s.window, C = s.c;
  GRID_STRIDE(i, batch * OH * OW * C) {
    const std::size_t c = i % C, ow = (i / C) % OW, oh = (i / (C * OW)) % OH, b = i / (C * OW * OH);
    const float* img = x + b * s.in_h * s.in_w * C;
    std::size_t best_at = ((oh * K) * s.in_w + ow * K) * C + c;
    float best = img[best_at];
    for (std::size_t kh = 0; kh < K; ++kh)
      for (std::size_t kw = 0; kw < K; ++kw) {
        const std::size_t at = ((oh * K + kh) * s.in_w + ow * K + kw) * C + c;
        if (img[at] > best) {
          best = img[at];
          best_at = at;
        }
      }
    y[i] = best;
    argmax[i] = static_cast<std::int32_t>(best_at);
  }
}

__global__ void maxpool_backward_k(const float* dy, const std::int32_t* argmax, std::size_t batch, PoolShape s,
                                   std::size_t OH, std::size_t OW, float* dx) {
  const std::size_t K = s.window, C = s.c, in = s.in_h * s.in_w * C;
  GRID_STRIDE(i, batch * in) {
    const std::size_t local = i % in, b = i / in;
    const std::size_t c = local % C, iw = (local / C) % s.in_w, ih = local / (C * s.in_w);
    const std::size_t oh = ih / K, ow = iw / K;
    float v = 0.0f;
    if (oh < OH && ow < OW) {
      const std::size_t o = ((b * OH + oh) * OW + ow) * C + c;
      if (static_cast<std::size_t>(argmax[o]) == local) v = dy[o];
    }
    dx[i] = v;
  }
}

__global__ void sgd_k(float* p, const float* g, float* v, std::size_t n, SgdUpdate u) {
  GRID_STRIDE(i, n) {
    if (!v) {
      p[i] -= u.lr * (g[i] + u.weight_decay * p[i]);
    } else {
      const float gi = g[i] + u.weight_decay * p[i];
      v[i] = u.momentum * v[i] + gi;
      p[i] -= u.nesterov ? u.lr * (gi + u.momentum * v[i]) : u.lr * v[i];
    }
  }
}

__global__ void adam_k(float* p, const float* g, float* m, float* v, std::size_t n, AdamUpdate u) {
  GRID_STRIDE(i, n) {
    const float gi = u.decoupled ? g[i] : g[i] + u.weight_decay * p[i];
    m[i] = u.beta1 * m[i] + (1.0f - u.beta1) * gi;
    v[i] = u.beta2 * v[i] + (1.0f - u.beta2) * gi * gi;
    p[i] = p[i] * u.decay - u.step * m[i] / (sqrtf(v[i]) * u.inv_sqrt_bc2 + u.eps);
  }
}

__global__ void mix_k(float* x, const float* m, const float* s, std::size_t n, float w, bool fused) {
  GRID_STRIDE(i, n) {
    const float d = __fsub_rn(m[i], s[i]);
    x[i] = fused ? __fmaf_rn(w, d, x[i]) : __fadd_rn(x[i], __fmul_rn(w, d));
  }
}

// Does this host's mix_into round x + w (m - s) once (FMA) or twice? Probed on values where
// the two differ, through the vectorised body and the scalar tail alike.
bool host_mix_is_fused() {
  const std::size_t n = 203;
  std::vector<float> x(n), m(n), s(n);
  Rng rng(0xF3A);
  for (std::size_t i = 0; i < n; ++i) {
    x[i] = static_cast<float>(rng.normal());
    m[i] = static_cast<float>(rng.normal());
    s[i] = static_cast<float>(rng.normal());
  }
  const float w = 1.0f / 3.0f;
  std::vector<float> out = x;
  mix_into(out, m, s, w);
  std::size_t fused = 0, split = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const float d = m[i] - s[i];
    volatile float prod = w * d;  // volatile: keep this product rounded on its own
    const float two = x[i] + prod;
    const float one = std::fma(w, d, x[i]);
    if (one != two) {
      fused += out[i] == one;
      split += out[i] == two;
    }
  }
  return fused > split;
}

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index) : dev_(index) {
    CUDA_CHECK(cudaSetDevice(dev_));
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, dev_));
    name_ = "cuda:" + std::to_string(dev_) + " (" + prop.name + ")";
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&blas_));
    CUBLAS_CHECK(cublasSetStream(blas_, stream_));
    CUBLAS_CHECK(cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));
    fused_mix_ = host_mix_is_fused();
  }
  ~CudaBackend() override {
    cudaSetDevice(dev_);
    if (stream_) cudaStreamSynchronize(stream_);
    if (ones_) cudaFree(ones_);
    if (row_loss_) cudaFree(row_loss_);
    if (row_loss_host_) cudaFreeHost(row_loss_host_);
    if (blas_) cublasDestroy(blas_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string name() const override { return name_; }
  bool host_memory() const override { return false; }

  void* allocate(std::size_t bytes) override {
    use();
    void* p = nullptr;
    CUDA_CHECK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
  }
  void deallocate(void* p) noexcept override {
    if (!p) return;
    cudaSetDevice(dev_);
    cudaStreamSynchronize(stream_);  // nothing queued may still use it
    cudaFree(p);
  }
  void* allocate_host(std::size_t bytes) override {
    use();
    void* p = nullptr;
    CUDA_CHECK(cudaMallocHost(&p, bytes ? bytes : 1));
    return p;
  }
  void deallocate_host(void* p) noexcept override {
    if (!p) return;
    cudaSetDevice(dev_);
    cudaStreamSynchronize(stream_);
    cudaFreeHost(p);
  }
  void upload(void* dst, const void* src, std::size_t bytes) override {
    use();
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  }
  void download(void* dst, const void* src, std::size_t bytes) override {
    use();
    if (bytes) CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }
  void synchronize() override {
    use();
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void gemm(bool ta, bool tb, std::size_t m, std::size_t n, std::size_t k, const float* a, const float* b,
            float* c) override {
    use();
    const float one = 1.0f, zero = 0.0f;
    CUBLAS_CHECK(cublasSgemm(blas_, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, int(n), int(m),
                             int(k), &one, b, int(tb ? k : n), a, int(ta ? m : k), &zero, c, int(n)));
  }
  void bias_activation(float* z, const float* bias, std::size_t rows, std::size_t cols, bool relu) override {
    use();
    bias_activation_k<<<blocks_for(rows * cols), kThreads, 0, stream_>>>(z, bias, rows, cols, relu);
    launched();
  }
  void relu_backward(float* d, const float* a, std::size_t n) override {
    use();
    relu_backward_k<<<blocks_for(n), kThreads, 0, stream_>>>(d, a, n);
    launched();
  }
  void column_sum(const float* d, std::size_t rows, std::size_t cols, float* out) override {
    use();
    ensure_ones(rows);
    const float one = 1.0f, zero = 0.0f;
    // d row-major (rows x cols) is column-major (cols x rows): out = that * ones.
    CUBLAS_CHECK(cublasSgemv(blas_, CUBLAS_OP_N, int(cols), int(rows), &one, d, int(cols), ones_, 1, &zero, out, 1));
  }
  double softmax_cross_entropy(const float* z, const std::int32_t* labels, std::size_t rows, std::size_t classes,
                               float* delta) override {
    use();
    ensure_row_loss(rows);
    softmax_xent_k<<<blocks_for(rows), kThreads, 0, stream_>>>(z, labels, rows, classes,
                                                                 1.0f / static_cast<float>(rows), delta, row_loss_);
    launched();
    return mean_row_loss(rows);
  }
  double squared_error(const float* z, const float* t, std::size_t rows, std::size_t cols, float* delta) override {
    use();
    ensure_row_loss(rows);
    squared_error_k<<<blocks_for(rows), kThreads, 0, stream_>>>(z, t, rows, cols, 1.0f / static_cast<float>(rows),
                                                                  delta, row_loss_);
    launched();
    return mean_row_loss(rows);
  }
  void gather_rows(const float* src, const std::int32_t* idx, std::size_t rows, std::size_t dim,
                   float* dst) override {
    use();
    gather_rows_k<<<blocks_for(rows * dim), kThreads, 0, stream_>>>(src, idx, rows, dim, dst);
    launched();
  }
  void gather_labels(const std::int32_t* src, const std::int32_t* idx, std::size_t rows,
                     std::int32_t* dst) override {
    use();
    gather_labels_k<<<blocks_for(rows), kThreads, 0, stream_>>>(src, idx, rows, dst);
    launched();
  }
  void im2col(const float* x, std::size_t batch, const ConvShape& s, float* col) override {
    use();
    const std::size_t n = batch * s.out_h() * s.out_w() * s.patch();
    im2col_k<<<blocks_for(n), kThreads, 0, stream_>>>(x, batch, s, s.out_h(), s.out_w(), col);
    launched();
  }
  void col2im(const float* col, std::size_t batch, const ConvShape& s, float* x) override {
    use();
    const std::size_t n = batch * s.in_h * s.in_w * s.in_c;
    col2im_k<<<blocks_for(n), kThreads, 0, stream_>>>(col, batch, s, s.out_h(), s.out_w(), x);
    launched();
  }
  void maxpool_forward(const float* x, std::size_t batch, const PoolShape& s, float* y,
                       std::int32_t* argmax) override {
    use();
    const std::size_t n = batch * s.out_h() * s.out_w() * s.c;
    maxpool_forward_k<<<blocks_for(n), kThreads, 0, stream_>>>(x, batch, s, s.out_h(), s.out_w(), y, argmax);
    launched();
  }
  void maxpool_backward(const float* dy, const std::int32_t* argmax, std::size_t batch, const PoolShape& s,
                        float* dx) override {
    use();
    const std::size_t n = batch * s.in_h * s.in_w * s.c;
    maxpool_backward_k<<<blocks_for(n), kThreads, 0, stream_>>>(dy, argmax, batch, s, s.out_h(), s.out_w(), dx);
    launched();
  }
  void sgd_update(float* p, const float* g, float* v, std::size_t n, const SgdUpdate& u) override {
    use();
    sgd_k<<<blocks_for(n), kThreads, 0, stream_>>>(p, g, v, n, u);
    launched();
  }
  void adam_update(float* p, const float* g, float* m, float* v, std::size_t n, const AdamUpdate& u) override {
    use();
    adam_k<<<blocks_for(n), kThreads, 0, stream_>>>(p, g, m, v, n, u);
    launched();
  }
  void mix(float* x, const float* m, const float* snap, std::size_t n, float w) override {
    use();
    mix_k<<<blocks_for(n), kThreads, 0, stream_>>>(x, m, snap, n, w, fused_mix_);
    launched();
  }

 private:
  void use() { CUDA_CHECK(cudaSetDevice(dev_)); }
  void launched() { CUDA_CHECK(cudaGetLastError()); }
  void ensure_ones(std::size_t rows) {
    if (rows <= ones_n_) return;
    if (ones_) {
      CUDA_CHECK(cudaStreamSynchronize(stream_));
      CUDA_CHECK(cudaFree(ones_));
      ones_ = nullptr;
    }
    std::vector<float> h(rows, 1.0f);
    CUDA_CHECK(cudaMalloc(&ones_, rows * sizeof(float)));
    CUDA_CHECK(cudaMemcpy(ones_, h.data(), rows * sizeof(float), cudaMemcpyHostToDevice));
    ones_n_ = rows;
  }
  void ensure_row_loss(std::size_t rows) {
    if (rows <= row_loss_n_) return;
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (row_loss_) CUDA_CHECK(cudaFree(row_loss_));
    if (row_loss_host_) CUDA_CHECK(cudaFreeHost(row_loss_host_));
    row_loss_ = nullptr;
    row_loss_host_ = nullptr;
    row_loss_n_ = 0;
    CUDA_CHECK(cudaMalloc(&row_loss_, rows * sizeof(double)));
    CUDA_CHECK(cudaMallocHost(&row_loss_host_, rows * sizeof(double)));
    row_loss_n_ = rows;
  }
  double mean_row_loss(std::size_t rows) {
    CUDA_CHECK(cudaMemcpyAsync(row_loss_host_, row_loss_, rows * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
    double loss = 0;
    for (std::size_t i = 0; i < rows; ++i) loss += row_loss_host_[i];
    return loss / static_cast<double>(rows);
  }

  int dev_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  bool fused_mix_ = false;
  float* ones_ = nullptr;
  std::size_t ones_n_ = 0;
  double* row_loss_ = nullptr;
  double* row_loss_host_ = nullptr;
  std::size_t row_loss_n_ = 0;
};

}  // namespace

int device_count(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why) *why = std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
    cudaGetLastError();  // clear it
    return 0;
  }
  if (n == 0 && why) *why = "the CUDA runtime reports 0 devices";
  return n;
}

std::shared_ptr<Backend> make_cuda_backend(int index) {
  std::string why;
  const int n = device_count(&why);
  if (n <= 0) throw NoDevice("no CUDA device found (cudaGetDeviceCount: " + why + "); use --device cpu");
  if (index < 0 || index >= n)
    throw NoDevice("CUDA device " + std::to_string(index) + " not found: this machine has " + std::to_string(n) +
                   " (cuda:0" + (n > 1 ? "..cuda:" + std::to_string(n - 1) : std::string()) + ")");
  return std::make_shared<CudaBackend>(index);
}

}  // namespace rumor::gpu
