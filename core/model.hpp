// Models: a fixed architecture that reads its parameters from one flat, contiguous float
// buffer owned by the caller. Layers are views (offset, rows, cols) into that buffer, and the
// gradient buffer has exactly the same layout, so optimizers, mixing, codecs and the wire all
// work on plain float spans and never need to know the architecture.
//
// Tensor dimensions used below:  B = batch rows, D = input width, H_i = hidden widths,
// C = outputs (classes, or regression targets).  Row-major throughout: X is B x D, layer l has
// W_l (in x out) then b_l (out); the layer computes Y = X W + b.
//
// Not thread-safe: a Model keeps activation workspaces between forward and backward. The math
// goes through a Backend (core/backend.hpp): Eigen on the CPU unless another is given.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/rng.hpp"

namespace rumor {

struct Dataset;
class Backend;

struct LayerView {
  std::string name;       // "fc1.weight", "fc1.bias", ...
  std::size_t offset = 0; // into the flat buffer
  std::size_t rows = 0, cols = 0;
  std::size_t size() const { return rows * cols; }
};

struct EvalResult {
  double loss = 0;      // mean loss
  double accuracy = 0;  // classification only (0 for regression)
  std::size_t rows = 0;
};

enum class LossKind { SoftmaxCrossEntropy, MeanSquaredError };

// How a model's parameters start (Model::init; rumor-peer --init, rumor-sim workload.init):
//  - He (Rumor's default): He-normal for the layers followed by ReLU, Xavier-uniform for the
//    output layer, zero biases;
//  - Torch: PyTorch's default for nn.Linear and nn.Conv2d (kaiming_uniform_ with a = sqrt(5)):
//    every weight and bias uniform in +-1/sqrt(fan_in). A torch MLP starts 2-3 points of
//    accuracy slower from it than from He's, so rumor-sim predicts torch peers with it.
enum class InitScheme : std::uint8_t { He, Torch };
// The schemes' names, in this order: the one list that parsing, naming, rumor-peer's --init
// check and rumor-sim's workload.init key read.
struct InitSchemeName {
  const char* name;
  InitScheme scheme;
};
std::span<const InitSchemeName> init_schemes();
// "he" or "torch"; std::invalid_argument naming both otherwise.
InitScheme parse_init_scheme(const std::string& name);
const char* init_scheme_name(InitScheme scheme);
// One layer's initial values: a weight of fan_in rows (its output width: fan_out), followed
// by ReLU or not, and its bias. Every model's init() goes through it.
void init_layer(InitScheme scheme, float* weight, std::size_t fan_in, std::size_t fan_out, bool relu, float* bias,
                Rng& rng);

class Model {
 public:
  virtual ~Model() = default;
  virtual std::size_t param_count() const = 0;
  // Architecture + parameter count + dtype, e.g. "mlp:784-256-128-10/ce/p235146/f32". Peers
  // whose fingerprints differ cannot mix parameters and are refused at the handshake.
  virtual std::string fingerprint() const = 0;
  virtual const std::vector<LayerView>& layers() const = 0;
  virtual std::size_t input_dim() const = 0;
  virtual std::size_t output_dim() const = 0;
  virtual LossKind loss_kind() const = 0;
  // Seeded initialisation under `scheme` (InitScheme: He by default).
  virtual void init(std::span<float> params, Rng& rng, InitScheme scheme) const = 0;
  void init(std::span<float> params, Rng& rng) const { init(params, rng, InitScheme::He); }
  // Mean loss over the batch; writes dLoss/dParams into `grad` (overwritten, same layout).
  // x: rows x input_dim. labels (classification) or targets (regression, rows x output_dim).
  virtual double loss_and_grad(std::span<const float> params, const float* x, std::size_t rows,
                               const std::int32_t* labels, const float* targets,
                               std::span<float> grad) = 0;
  // Loss and accuracy over a whole data set, in chunks.
  virtual EvalResult evaluate(std::span<const float> params, const Dataset& d) = 0;

  // The backend the math runs on (core/backend.hpp). The two calls above take host memory on
  // any backend (a device backend stages it: convenient, not fast); the two below take
  // params, x, labels, targets and grad in the backend's memory, for a caller that keeps them
  // resident there (Trainer). Labels must be in [0, output_dim()) (checked on the CPU only).
  virtual Backend& backend() = 0;
  virtual double loss_and_grad_on_backend(const float* params, const float* x, std::size_t rows,
                                          const std::int32_t* labels, const float* targets, float* grad) = 0;
  // params in the backend's memory; the data set on the host (uploaded in chunks).
  virtual EvalResult evaluate_on_backend(const float* params, const Dataset& d) = 0;
};

// "mlp:256,128" (hidden widths), "logreg" (no hidden layer, softmax), "linreg" (no hidden
// layer, mean squared error), or "cnn:..." (a convolutional network, see make_conv_model).
// Throws std::invalid_argument naming the accepted forms.
// `backend`: where the math runs; null = a CpuBackend (Eigen).
std::unique_ptr<Model> make_model(const std::string& spec, std::size_t input_dim,
                                  std::size_t output_dim, std::shared_ptr<Backend> backend = nullptr);

// A convolutional network (core/convnet.cpp), softmax cross-entropy over output_dim classes:
//   cnn:[iHxWxC,]TOKEN[,TOKEN...]
//   cNkK[sS][pP]  convolution, N filters of K x K, stride S (1), zero padding P (0, < K), ReLU
//   pK            max pool over K x K tiles, stride K (floor: a partial last tile is dropped)
//   fN            dense layer of N units, ReLU (flattens the image first; no c or p after it)
// then a dense output layer of output_dim. The input is an image of H x W pixels and C
// channels, NHWC (channel fastest); without the iHxWxC token it is square and single-channel,
// side sqrt(input_dim) (Fashion-MNIST: 784 = 28x28x1), and a non-square input_dim is refused.
// The fingerprint spells every layer out (cnn:28x28x1-c32k5s1p0-p2-...-10/ce/pCOUNT/f32), so
// two specs that build the same network agree and any other change differs.
// Throws std::invalid_argument naming the bad token and the grammar.
std::unique_ptr<Model> make_conv_model(const std::string& spec, std::size_t input_dim, std::size_t output_dim,
                                       std::shared_ptr<Backend> backend = nullptr);

// Accumulates an evaluation over chunks of a model's outputs (n rows of C), in row order:
// softmax cross-entropy in double from the logits and argmax accuracy, or squared error.
struct OutputScore {
  double loss_sum = 0;
  std::size_t correct = 0;
  // `out` holds the outputs of rows first_row .. first_row+n-1 of `d`.
  void add(const float* out, std::size_t n, std::size_t first_row, const Dataset& d, LossKind loss,
           std::size_t C);
  EvalResult result(const Dataset& d, LossKind loss) const;
};

}  // namespace rumor

namespace rumor {
// Threads the model math may use (Eigen's GEMM through OpenMP); 1 = single-threaded, the
// default, which is also what the simulator uses so runs stay reproducible.
void set_math_threads(int threads);
int math_threads();
}  // namespace rumor
