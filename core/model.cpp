// Fully connected networks on Eigen: the MLP (ReLU hidden layers), multinomial logistic
// regression (no hidden layer) and linear regression (no hidden layer, MSE).
//
// Dimensions: B batch rows, widths[0] = D input, widths[L] = C outputs; layer l maps
// widths[l-1] -> widths[l] with W_l (widths[l-1] x widths[l], row-major) and b_l.
// Forward keeps every activation A_l (B x widths[l]) for the backward pass; ReLU's derivative is
// read off A_l > 0, so pre-activations are not stored.
#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <stdexcept>

#include "core/check.hpp"
#include "core/dataset.hpp"
#include "core/model.hpp"

namespace rumor {
namespace {

using RowMat = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
using MapMat = Eigen::Map<RowMat>;
using MapConstMat = Eigen::Map<const RowMat>;
using MapConstVec = Eigen::Map<const Eigen::RowVectorXf>;
using MapVec = Eigen::Map<Eigen::RowVectorXf>;

class DenseNet final : public Model {
 public:
  DenseNet(std::string kind, std::vector<std::size_t> widths, LossKind loss)
      : kind_(std::move(kind)), widths_(std::move(widths)), loss_(loss) {
    RUMOR_CHECK(widths_.size() >= 2);
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
    acts_.resize(widths_.size());
  }

  std::size_t param_count() const override { return count_; }
  std::string fingerprint() const override { return fingerprint_; }
  const std::vector<LayerView>& layers() const override { return layers_; }
  std::size_t input_dim() const override { return widths_.front(); }
  std::size_t output_dim() const override { return widths_.back(); }
  LossKind loss_kind() const override { return loss_; }

  void init(std::span<float> params, Rng& rng) const override {
    RUMOR_CHECK(params.size() == count_);
    const std::size_t L = widths_.size() - 1;
    for (std::size_t l = 0; l < L; ++l) {
      const LayerView& w = layers_[2 * l];
      const LayerView& b = layers_[2 * l + 1];
      float* pw = params.data() + w.offset;
      if (l + 1 < L) {  // followed by ReLU: He normal
        const double sd = std::sqrt(2.0 / static_cast<double>(w.rows));
        for (std::size_t i = 0; i < w.size(); ++i) pw[i] = static_cast<float>(rng.normal() * sd);
      } else {  // output layer: Xavier uniform
        const double a = std::sqrt(6.0 / static_cast<double>(w.rows + w.cols));
        for (std::size_t i = 0; i < w.size(); ++i) pw[i] = static_cast<float>(rng.uniform(-a, a));
      }
      std::fill_n(params.data() + b.offset, b.size(), 0.0f);
    }
  }

  double loss_and_grad(std::span<const float> params, const float* x, std::size_t rows,
                       const std::int32_t* labels, const float* targets,
                       std::span<float> grad) override {
    RUMOR_CHECK(params.size() == count_ && grad.size() == count_);
    RUMOR_CHECK(rows > 0);
    forward(params, x, rows);
    const std::size_t L = widths_.size() - 1;
    RowMat& out = acts_[L];
    // dL/dZ_L into `delta_` (B x C), and the mean loss.
    const double loss = output_delta(out, rows, labels, targets);
    // Backward through the layers.
    for (std::size_t l = L; l >= 1; --l) {
      const LayerView& w = layers_[2 * (l - 1)];
      const LayerView& b = layers_[2 * (l - 1) + 1];
      RowMat& d = (l == L) ? delta_ : deltas_[l];
      MapMat gw(grad.data() + w.offset, w.rows, w.cols);
      MapVec gb(grad.data() + b.offset, w.cols);
      if (l == 1) {
        MapConstMat xin(x, rows, widths_[0]);
        gw.noalias() = xin.transpose() * d;
      } else {
        gw.noalias() = acts_[l - 1].transpose() * d;
      }
      gb.noalias() = d.colwise().sum();
      if (l > 1) {
        MapConstMat wm(params.data() + w.offset, w.rows, w.cols);
        RowMat& dp = deltas_[l - 1];
        dp.resize(rows, w.rows);
        dp.noalias() = d * wm.transpose();
        // ReLU derivative from the activation.
        const float* a = acts_[l - 1].data();
        float* pd = dp.data();
        const std::size_t n = dp.size();
        for (std::size_t i = 0; i < n; ++i) pd[i] = a[i] > 0.0f ? pd[i] : 0.0f;
      }
    }
    return loss;
  }

  EvalResult evaluate(std::span<const float> params, const Dataset& d) override {
    RUMOR_CHECK(params.size() == count_);
    RUMOR_CHECK(d.dim == input_dim(), "data set width does not match the model");
    EvalResult r;
    const std::size_t chunk = 1024;
    double loss_sum = 0;
    std::size_t correct = 0;
    for (std::size_t s = 0; s < d.rows; s += chunk) {
      const std::size_t n = std::min(chunk, d.rows - s);
      forward(params, d.x.data() + s * d.dim, n);
      const RowMat& out = acts_.back();
      const std::size_t C = output_dim();
      for (std::size_t i = 0; i < n; ++i) {
        const float* z = out.data() + i * C;
        if (loss_ == LossKind::SoftmaxCrossEntropy) {
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
    r.rows = d.rows;
    r.loss = d.rows ? loss_sum / static_cast<double>(d.rows) : 0.0;
    r.accuracy = (d.rows && loss_ == LossKind::SoftmaxCrossEntropy)
                     ? static_cast<double>(correct) / static_cast<double>(d.rows)
                     : 0.0;
    return r;
  }

 private:
  void forward(std::span<const float> params, const float* x, std::size_t rows) {
    const std::size_t L = widths_.size() - 1;
    for (std::size_t l = 1; l <= L; ++l) {
      const LayerView& w = layers_[2 * (l - 1)];
      const LayerView& b = layers_[2 * (l - 1) + 1];
      MapConstMat wm(params.data() + w.offset, w.rows, w.cols);
      MapConstVec bv(params.data() + b.offset, w.cols);
      RowMat& a = acts_[l];
      a.resize(rows, w.cols);
      if (l == 1) {
        MapConstMat xin(x, rows, widths_[0]);
        a.noalias() = xin * wm;
      } else {
        a.noalias() = acts_[l - 1] * wm;
      }
      // Bias, then ReLU on hidden layers, fused in one pass.
      float* pa = a.data();
      const float* pb = bv.data();
      const std::size_t C = w.cols;
      const bool relu = l < L;
      for (std::size_t i = 0; i < rows; ++i) {
        float* row = pa + i * C;
        if (relu)
          for (std::size_t c = 0; c < C; ++c) row[c] = std::max(row[c] + pb[c], 0.0f);
        else
          for (std::size_t c = 0; c < C; ++c) row[c] += pb[c];
      }
    }
  }

  // Writes dLoss/dOutput (already divided by B) into delta_ and returns the mean loss.
  double output_delta(const RowMat& out, std::size_t rows, const std::int32_t* labels,
                      const float* targets) {
    const std::size_t C = output_dim();
    delta_.resize(rows, C);
    const float inv_b = 1.0f / static_cast<float>(rows);
    double loss = 0;
    for (std::size_t i = 0; i < rows; ++i) {
      const float* z = out.data() + i * C;
      float* g = delta_.data() + i * C;
      if (loss_ == LossKind::SoftmaxCrossEntropy) {
        const std::int32_t y = labels[i];
        RUMOR_CHECK(y >= 0 && static_cast<std::size_t>(y) < C, "label out of range");
        const float m = *std::max_element(z, z + C);
        float se = 0;
        for (std::size_t c = 0; c < C; ++c) {
          g[c] = std::exp(z[c] - m);
          se += g[c];
        }
        const float inv = 1.0f / se;
        for (std::size_t c = 0; c < C; ++c) g[c] *= inv * inv_b;
        g[y] -= inv_b;
        loss += std::log(static_cast<double>(se)) - static_cast<double>(z[y] - m);
      } else {
        const float* t = targets + i * C;
        for (std::size_t c = 0; c < C; ++c) {
          const float e = z[c] - t[c];
          g[c] = e * inv_b;
          loss += 0.5 * static_cast<double>(e) * e;
        }
      }
    }
    return loss / static_cast<double>(rows);
  }

  std::string kind_;
  std::vector<std::size_t> widths_;
  LossKind loss_;
  std::vector<LayerView> layers_;
  std::size_t count_ = 0;
  std::string fingerprint_;
  std::vector<RowMat> acts_;    // acts_[l] = output of layer l (acts_[0] unused: input is x)
  RowMat delta_;                // dL/dZ of the output layer
  std::vector<RowMat> deltas_ = std::vector<RowMat>(16);  // dL/dZ of hidden layer l
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

std::unique_ptr<Model> make_model(const std::string& spec, std::size_t input_dim,
                                  std::size_t output_dim) {
  if (input_dim == 0 || output_dim == 0) throw std::invalid_argument("model needs non-empty input and output");
  if (spec == "logreg")
    return std::make_unique<DenseNet>("logreg", std::vector<std::size_t>{input_dim, output_dim},
                                      LossKind::SoftmaxCrossEntropy);
  if (spec == "linreg")
    return std::make_unique<DenseNet>("linreg", std::vector<std::size_t>{input_dim, output_dim},
                                      LossKind::MeanSquaredError);
  if (spec.rfind("mlp:", 0) == 0) {
    std::vector<std::size_t> w{input_dim};
    for (auto h : parse_widths(spec.substr(4), spec)) w.push_back(h);
    w.push_back(output_dim);
    return std::make_unique<DenseNet>("mlp", std::move(w), LossKind::SoftmaxCrossEntropy);
  }
  throw std::invalid_argument("bad --model '" + spec + "': expected mlp:W1[,W2...], logreg or linreg");
}

}  // namespace rumor

namespace rumor {
void set_math_threads(int threads) { Eigen::setNbThreads(threads < 1 ? 1 : threads); }
int math_threads() { return Eigen::nbThreads(); }
}  // namespace rumor
