// Fully connected networks: the MLP (ReLU hidden layers), multinomial logistic regression (no
// hidden layer) and linear regression (no hidden layer, MSE), written once over the Backend
// operations (core/backend.hpp): Eigen on the CPU by default, cuBLAS and kernels on a GPU.
//
// Dimensions: B batch rows, widths[0] = D input, widths[L] = C outputs; layer l maps
// widths[l-1] -> widths[l] with W_l (widths[l-1] x widths[l], row-major) and b_l.
// Forward keeps every activation A_l (B x widths[l]) for the backward pass; ReLU's derivative is
// read off A_l > 0, so pre-activations are not stored.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/model.hpp"
#include "data/dataset.hpp"

namespace rumor {
namespace {

class DenseNet final : public Model {
 public:
  DenseNet(std::string kind, std::vector<std::size_t> widths, LossKind loss, std::shared_ptr<Backend> be)
      : kind_(std::move(kind)), widths_(std::move(widths)), loss_(loss), be_(std::move(be)) {
    RUMOR_CHECK(widths_.size() >= 2);
    RUMOR_CHECK(be_ != nullptr);
    std::size_t off = 0;
    for (std::size_t l = 1; l < widths_.size(); ++l) {
      const std::string n = "fc" + std::to_string(l);
      layers_.push_back({n + ".weight", off, widths_[l - 1], widths_[l]});
      off += widths_[l - 1] * widths_[l];
      layers_.push_back({n + ".bias", off, 1, widths_[l]});
      off += widths_[l];
    }
    count_ = off;
    fingerprint_ = kind_ + ":";
    for (std::size_t i = 0; i < widths_.size(); ++i)
      fingerprint_ += (i ? "-" : "") + std::to_string(widths_[i]);
    fingerprint_ += loss_ == LossKind::SoftmaxCrossEntropy ? "/ce" : "/mse";
    fingerprint_ += "/p" + std::to_string(count_) + "/f32";
    for (auto* v : {&acts_, &deltas_}) {
      v->resize(widths_.size());
      for (auto& b : *v) b.bind(*be_);
    }
    for (auto* b : {&delta_, &stage_params_, &stage_x_, &stage_targets_, &stage_grad_}) b->bind(*be_);
    stage_labels_.bind(*be_);
  }

  std::size_t param_count() const override { return count_; }
  std::string fingerprint() const override { return fingerprint_; }
  const std::vector<LayerView>& layers() const override { return layers_; }
  std::size_t input_dim() const override { return widths_.front(); }
  std::size_t output_dim() const override { return widths_.back(); }
  LossKind loss_kind() const override { return loss_; }
  Backend& backend() override { return *be_; }

  using Model::init;
  void init(std::span<float> params, Rng& rng, InitScheme scheme) const override {
    RUMOR_CHECK(params.size() == count_);
    const std::size_t L = widths_.size() - 1;
    for (std::size_t l = 0; l < L; ++l) {
      const LayerView& w = layers_[2 * l];
      const LayerView& b = layers_[2 * l + 1];
      init_layer(scheme, params.data() + w.offset, w.rows, w.cols, l + 1 < L, params.data() + b.offset, rng);
    }
  }

  double loss_and_grad(std::span<const float> params, const float* x, std::size_t rows,
                       const std::int32_t* labels, const float* targets,
                       std::span<float> grad) override {
    RUMOR_CHECK(params.size() == count_ && grad.size() == count_);
    RUMOR_CHECK(rows > 0);
    if (be_->host_memory()) return loss_and_grad_on_backend(params.data(), x, rows, labels, targets, grad.data());
    // A device backend: stage the host data through its memory (tests and tools; the Trainer
    // keeps everything resident instead).
    stage_params_.upload(params);
    stage_x_.upload({x, rows * input_dim()});
    if (loss_ == LossKind::SoftmaxCrossEntropy) {
      check_labels(labels, rows);
      stage_labels_.upload({labels, rows});
    } else {
      stage_targets_.upload({targets, rows * output_dim()});
    }
    stage_grad_.reserve(count_);
    const double loss = loss_and_grad_on_backend(stage_params_.data(), stage_x_.data(), rows, stage_labels_.data(),
                                                 stage_targets_.data(), stage_grad_.data());
    stage_grad_.download(grad);
    return loss;
  }

  double loss_and_grad_on_backend(const float* params, const float* x, std::size_t rows,
                                  const std::int32_t* labels, const float* targets, float* grad) override {
    RUMOR_CHECK(rows > 0);
    forward(params, x, rows);
    const std::size_t L = widths_.size() - 1;
    // dL/dZ_L into `delta_` (B x C), and the mean loss.
    const std::size_t C = output_dim();
    delta_.reserve(rows * C);
    const double loss = loss_ == LossKind::SoftmaxCrossEntropy
                            ? be_->softmax_cross_entropy(acts_[L].data(), labels, rows, C, delta_.data())
                            : be_->squared_error(acts_[L].data(), targets, rows, C, delta_.data());
    // Backward through the layers.
    for (std::size_t l = L; l >= 1; --l) {
      const LayerView& w = layers_[2 * (l - 1)];
      const LayerView& b = layers_[2 * (l - 1) + 1];
      const float* d = (l == L) ? delta_.data() : deltas_[l].data();
      const float* in = l == 1 ? x : acts_[l - 1].data();
      be_->gemm(true, false, w.rows, w.cols, rows, in, d, grad + w.offset);  // in^T d
      be_->column_sum(d, rows, w.cols, grad + b.offset);
      if (l > 1) {
        Buffer<float>& dp = deltas_[l - 1];
        dp.reserve(rows * w.rows);
        be_->gemm(false, true, rows, w.rows, w.cols, d, params + w.offset, dp.data());  // d W^T
        // ReLU derivative from the activation.
        be_->relu_backward(dp.data(), acts_[l - 1].data(), rows * w.rows);
      }
    }
    return loss;
  }

  EvalResult evaluate(std::span<const float> params, const Dataset& d) override {
    RUMOR_CHECK(params.size() == count_);
    if (be_->host_memory()) return evaluate_on_backend(params.data(), d);
    stage_params_.upload(params);
    return evaluate_on_backend(stage_params_.data(), d);
  }

  EvalResult evaluate_on_backend(const float* params, const Dataset& d) override {
    RUMOR_CHECK(d.dim == input_dim(), "data set width does not match the model");
    const std::size_t chunk = 1024;
    OutputScore score;
    const bool host = be_->host_memory();
    const std::size_t C = output_dim();
    for (std::size_t s = 0; s < d.rows; s += chunk) {
      const std::size_t n = std::min(chunk, d.rows - s);
      const float* xs = d.x.data() + s * d.dim;
      if (!host) {
        stage_x_.upload({xs, n * d.dim});
        xs = stage_x_.data();
      }
      forward(params, xs, n);
      const float* out = acts_.back().data();
      if (!host) {
        logits_.resize(n * C);
        be_->download(logits_.data(), out, n * C * sizeof(float));
        out = logits_.data();
      }
      score.add(out, n, s, d, loss_, C);
    }
    return score.result(d, loss_);
  }

 private:
  void check_labels(const std::int32_t* labels, std::size_t rows) const {
    for (std::size_t i = 0; i < rows; ++i)
      RUMOR_CHECK(labels[i] >= 0 && static_cast<std::size_t>(labels[i]) < output_dim(), "label out of range");
  }

  void forward(const float* params, const float* x, std::size_t rows) {
    const std::size_t L = widths_.size() - 1;
    for (std::size_t l = 1; l <= L; ++l) {
      const LayerView& w = layers_[2 * (l - 1)];
      const LayerView& b = layers_[2 * (l - 1) + 1];
      Buffer<float>& a = acts_[l];
      a.reserve(rows * w.cols);
      be_->gemm(false, false, rows, w.cols, w.rows, l == 1 ? x : acts_[l - 1].data(), params + w.offset, a.data());
      be_->bias_activation(a.data(), params + b.offset, rows, w.cols, l < L);
    }
  }

  std::string kind_;
  std::vector<std::size_t> widths_;
  LossKind loss_;
  std::shared_ptr<Backend> be_;
  std::vector<LayerView> layers_;
  std::size_t count_ = 0;
  std::string fingerprint_;
  // In the backend's memory: activations acts_[l] = output of layer l (acts_[0] unused: the
  // input is x), dL/dZ of the output layer (delta_) and of hidden layer l (deltas_[l]).
  std::vector<Buffer<float>> acts_, deltas_;
  Buffer<float> delta_;
  // Device backends only: host data staged for the host-memory entry points.
  Buffer<float> stage_params_, stage_x_, stage_targets_, stage_grad_;
  Buffer<std::int32_t> stage_labels_;
  std::vector<float> logits_;  // evaluation's outputs, downloaded
};

std::vector<std::size_t> parse_widths(const std::string& s, const std::string& spec) {
  std::vector<std::size_t> w;
  std::size_t i = 0;
  while (i < s.size()) {
    std::size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string tok = s.substr(i, j - i);
    std::size_t pos = 0;
    unsigned long v = 0;
    try {
      v = std::stoul(tok, &pos);
    } catch (...) {
      pos = 0;
    }
    if (tok.empty() || pos != tok.size() || v == 0 || v > (1u << 20))
      throw std::invalid_argument("bad --model '" + spec +
                                  "': hidden widths must be positive integers, e.g. mlp:256,128");
    w.push_back(v);
    i = j + 1;
  }
  if (w.empty() || w.size() > 14)
    throw std::invalid_argument("bad --model '" + spec + "': give 1 to 14 hidden widths, e.g. mlp:256,128");
  return w;
}

}  // namespace

void OutputScore::add(const float* out, std::size_t n, std::size_t s, const Dataset& d, LossKind loss,
                      std::size_t C) {
  for (std::size_t i = 0; i < n; ++i) {
    const float* z = out + i * C;
    if (loss == LossKind::SoftmaxCrossEntropy) {
      const std::int32_t y = d.labels[s + i];
      const float m = *std::max_element(z, z + C);
      double se = 0;
      for (std::size_t c = 0; c < C; ++c) se += std::exp(static_cast<double>(z[c] - m));
      loss_sum += std::log(se) - static_cast<double>(z[y] - m);
      const std::size_t am = static_cast<std::size_t>(std::max_element(z, z + C) - z);
      correct += (am == static_cast<std::size_t>(y));
    } else {
      const float* t = d.targets.data() + (s + i) * C;
      double e = 0;
      for (std::size_t c = 0; c < C; ++c) e += 0.5 * double(z[c] - t[c]) * double(z[c] - t[c]);
      loss_sum += e;
    }
  }
}

EvalResult OutputScore::result(const Dataset& d, LossKind loss) const {
  EvalResult r;
  r.rows = d.rows;
  r.loss = d.rows ? loss_sum / static_cast<double>(d.rows) : 0.0;
  r.accuracy = (d.rows && loss == LossKind::SoftmaxCrossEntropy)
                   ? static_cast<double>(correct) / static_cast<double>(d.rows)
                   : 0.0;
  return r;
}

std::span<const InitSchemeName> init_schemes() {
  static constexpr InitSchemeName kSchemes[] = {{"he", InitScheme::He}, {"torch", InitScheme::Torch}};
  return kSchemes;
}

InitScheme parse_init_scheme(const std::string& name) {
  for (const InitSchemeName& s : init_schemes())
    if (name == s.name) return s.scheme;
  throw std::invalid_argument("unknown initialisation '" + name +
                              "': expected he (He-normal, Rumor's default) or torch (PyTorch's nn.Linear/nn.Conv2d default)");
}

const char* init_scheme_name(InitScheme scheme) {
  for (const InitSchemeName& s : init_schemes())
    if (s.scheme == scheme) return s.name;
  return "?";
}

void init_layer(InitScheme scheme, float* weight, std::size_t fan_in, std::size_t fan_out, bool relu, float* bias,
                Rng& rng) {
  const std::size_t n = fan_in * fan_out;
  if (scheme == InitScheme::Torch) {
    // kaiming_uniform_(a = sqrt(5)) gives gain sqrt(2 / 6) and bound gain * sqrt(3 / fan_in),
    // that is 1 / sqrt(fan_in); the bias is uniform in the same bound.
    const double a = 1.0 / std::sqrt(static_cast<double>(fan_in));
    for (std::size_t i = 0; i < n; ++i) weight[i] = static_cast<float>(rng.uniform(-a, a));
    for (std::size_t i = 0; i < fan_out; ++i) bias[i] = static_cast<float>(rng.uniform(-a, a));
    return;
  }
  if (relu) {  // followed by ReLU: He normal over the fan-in
    const double sd = std::sqrt(2.0 / static_cast<double>(fan_in));
    for (std::size_t i = 0; i < n; ++i) weight[i] = static_cast<float>(rng.normal() * sd);
  } else {  // the output layer: Xavier uniform
    const double a = std::sqrt(6.0 / static_cast<double>(fan_in + fan_out));
    for (std::size_t i = 0; i < n; ++i) weight[i] = static_cast<float>(rng.uniform(-a, a));
  }
  std::fill_n(bias, fan_out, 0.0f);
}

std::unique_ptr<Model> make_model(const std::string& spec, std::size_t input_dim,
                                  std::size_t output_dim, std::shared_ptr<Backend> backend) {
  if (!backend) backend = make_cpu_backend();
  if (input_dim == 0 || output_dim == 0) throw std::invalid_argument("model needs non-empty input and output");
  if (spec == "logreg")
    return std::make_unique<DenseNet>("logreg", std::vector<std::size_t>{input_dim, output_dim},
                                      LossKind::SoftmaxCrossEntropy, backend);
  if (spec == "linreg")
    return std::make_unique<DenseNet>("linreg", std::vector<std::size_t>{input_dim, output_dim},
                                      LossKind::MeanSquaredError, backend);
  if (spec.rfind("mlp:", 0) == 0) {
    std::vector<std::size_t> w{input_dim};
    for (auto h : parse_widths(spec.substr(4), spec)) w.push_back(h);
    w.push_back(output_dim);
    return std::make_unique<DenseNet>("mlp", std::move(w), LossKind::SoftmaxCrossEntropy, backend);
  }
  if (spec.rfind("cnn:", 0) == 0) return make_conv_model(spec, input_dim, output_dim, backend);
  throw std::invalid_argument("bad --model '" + spec +
                              "': expected mlp:W1[,W2...], logreg, linreg or cnn:LAYERS (e.g. cnn:c32k5,p2,c64k5,p2,f1024)");
}

}  // namespace rumor

namespace rumor {
void set_math_threads(int threads) { Eigen::setNbThreads(threads < 1 ? 1 : threads); }
int math_threads() { return Eigen::nbThreads(); }

namespace {
// Single-threaded until someone asks for more (model.hpp): left alone, Eigen takes OpenMP's
// default, one thread per core, and its parallel GEMM then did not give the same sums from run
// to run under ASan (a seeded CNN in test_core ended between 0.926 and 0.95 instead of 0.954).
const bool kOneMathThreadByDefault = (set_math_threads(1), true);
}  // namespace
}  // namespace rumor
