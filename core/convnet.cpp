// Convolutional networks ("cnn:" specs): a chain of convolutions (ReLU), max pools and dense
// ReLU layers, then a dense output layer with softmax cross-entropy, written once over the
// Backend operations (core/backend.hpp) like the dense models in model.cpp.
//
// Layout. Images are NHWC (channel fastest). A convolution is im2col + one GEMM for the whole
// batch: cols (B*OH*OW x K*K*Cin) times the filter matrix (K*K*Cin x F) gives B*OH*OW x F,
// which is already the next NHWC activation, so bias + ReLU is the dense layers' fused
// bias_activation over B*OH*OW rows. Flatten is free: a dense layer reads an NHWC activation
// as B rows of H*W*C features (its weight rows are in (h, w, c) order). Parameters are views
// into the one flat buffer, in stage order: conv1.weight (K*K*Cin x F, rows in (kh, kw, c)
// order), conv1.bias (F), ..., fc1.weight (in x out), fc1.bias, ..., the output layer last.
//
// Backward (per stage, last to first; d = dLoss/d(stage output), already through the ReLU):
//   conv:  dW = cols^T d,  db = column sums of d,  d(input) = col2im(d W^T)
//   pool:  d(input) = d routed to each tile's argmax (kept from the forward pass)
//   dense: dW = in^T d,  db = column sums of d,  d(input) = d W^T
// and ReLU's derivative is read off the stored activation (> 0), as in model.cpp. Nothing is
// computed for stages before the first one with parameters.
//
// Workspace (kept between calls, grown once, never per sample): every stage's activation and
// its gradient, each convolution's cols (needed again by the backward pass), one shared patch
// gradient, each pool's argmax. Evaluation runs in chunks sized so that the largest per-chunk
// cols stay near 16 MB.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <stdexcept>

#include "core/backend.hpp"
#include "core/check.hpp"
#include "core/model.hpp"
#include "data/dataset.hpp"

namespace rumor {
namespace {

struct Stage {
  enum class Kind { Conv, Pool, Dense } kind = Kind::Dense;
  ConvShape conv;             // Conv
  PoolShape pool;             // Pool
  std::size_t in = 0, out = 0;  // floats per sample in and out (Dense: its widths)
  std::size_t weight = 0, bias = 0;  // indices into layers_ (Conv, Dense)
  bool relu = false;          // output passed through ReLU (every Conv, hidden Dense)
  bool has_params() const { return kind != Kind::Pool; }
};

[[noreturn]] void bad_spec(const std::string& spec, const std::string& why) {
  throw std::invalid_argument("bad --model '" + spec + "': " + why +
                              " (grammar: cnn:[iHxWxC,]TOKEN,... with TOKEN cNkK[sS][pP] a convolution of N "
                              "filters K x K, stride S, padding P; pK a K x K max pool; fN a dense layer of N; "
                              "e.g. cnn:c32k5,p2,c64k5,p2,f1024)");
}

// "c32k5s2p1" -> {{'c',32},{'k',5},{'s',2},{'p',1}}; nullopt-like empty on a malformed token.
std::vector<std::pair<char, std::size_t>> split_token(const std::string& tok) {
  std::vector<std::pair<char, std::size_t>> parts;
  std::size_t i = 0;
  while (i < tok.size()) {
    const char letter = tok[i++];
    if (!std::isalpha(static_cast<unsigned char>(letter))) return {};
    std::size_t v = 0, digits = 0;
    while (i < tok.size() && std::isdigit(static_cast<unsigned char>(tok[i]))) {
      v = v * 10 + static_cast<std::size_t>(tok[i++] - '0');
      if (++digits > 7) return {};
    }
    if (digits == 0) return {};
    parts.emplace_back(letter, v);
  }
  return parts;
}

class ConvNet final : public Model {
 public:
  ConvNet(const std::string& spec, std::size_t input_dim, std::size_t output_dim, std::shared_ptr<Backend> be)
      : be_(std::move(be)), input_dim_(input_dim), output_dim_(output_dim) {
    RUMOR_CHECK(be_ != nullptr);
    parse(spec);
    for (auto* v : {&acts_, &deltas_, &cols_}) {
      v->resize(stages_.size());
      for (auto& b : *v) b.bind(*be_);
    }
    argmax_.resize(stages_.size());
    for (auto& b : argmax_) b.bind(*be_);
    for (auto* b : {&delta_, &dcol_, &stage_params_, &stage_x_, &stage_grad_}) b->bind(*be_);
    stage_labels_.bind(*be_);
    std::size_t ws = 1;
    for (const Stage& s : stages_) {
      ws = std::max(ws, s.out);
      if (s.kind == Stage::Kind::Conv) ws = std::max(ws, s.conv.out_h() * s.conv.out_w() * s.conv.patch());
    }
    eval_chunk_ = std::clamp<std::size_t>((std::size_t{1} << 22) / ws, 16, 1024);
  }

  std::size_t param_count() const override { return count_; }
  std::string fingerprint() const override { return fingerprint_; }
  const std::vector<LayerView>& layers() const override { return layers_; }
  std::size_t input_dim() const override { return input_dim_; }
  std::size_t output_dim() const override { return output_dim_; }
  LossKind loss_kind() const override { return LossKind::SoftmaxCrossEntropy; }
  Backend& backend() override { return *be_; }

  using Model::init;
  void init(std::span<float> params, Rng& rng, InitScheme scheme) const override {
    RUMOR_CHECK(params.size() == count_);
    for (const Stage& s : stages_) {
      if (!s.has_params()) continue;
      const LayerView& w = layers_[s.weight];  // rows: the fan-in (K*K*Cin or in)
      const LayerView& b = layers_[s.bias];
      init_layer(scheme, params.data() + w.offset, w.rows, w.cols, s.relu, params.data() + b.offset, rng);
    }
  }

  double loss_and_grad(std::span<const float> params, const float* x, std::size_t rows,
                       const std::int32_t* labels, const float* targets, std::span<float> grad) override {
    RUMOR_CHECK(params.size() == count_ && grad.size() == count_);
    RUMOR_CHECK(rows > 0);
    if (be_->host_memory()) return loss_and_grad_on_backend(params.data(), x, rows, labels, targets, grad.data());
    check_labels(labels, rows);
    stage_params_.upload(params);
    stage_x_.upload({x, rows * input_dim_});
    stage_labels_.upload({labels, rows});
    stage_grad_.reserve(count_);
    const double loss = loss_and_grad_on_backend(stage_params_.data(), stage_x_.data(), rows, stage_labels_.data(),
                                                 nullptr, stage_grad_.data());
    stage_grad_.download(grad);
    return loss;
  }

  double loss_and_grad_on_backend(const float* params, const float* x, std::size_t rows,
                                  const std::int32_t* labels, const float*, float* grad) override {
    RUMOR_CHECK(rows > 0);
    forward(params, x, rows);
    const std::size_t L = stages_.size() - 1;
    delta_.reserve(rows * output_dim_);
    const double loss = be_->softmax_cross_entropy(acts_[L].data(), labels, rows, output_dim_, delta_.data());
    for (std::size_t i = L + 1; i-- > first_param_stage_;) {
      const Stage& s = stages_[i];
      const float* d = i == L ? delta_.data() : deltas_[i].data();
      const float* in = i == 0 ? x : acts_[i - 1].data();
      const bool need_input_grad = i > first_param_stage_;
      float* dprev = nullptr;
      if (need_input_grad) {
        deltas_[i - 1].reserve(rows * s.in);
        dprev = deltas_[i - 1].data();
      }
      switch (s.kind) {
        case Stage::Kind::Conv: {
          const LayerView& w = layers_[s.weight];
          const std::size_t pix = rows * s.conv.out_h() * s.conv.out_w();
          be_->gemm(true, false, w.rows, w.cols, pix, cols_[i].data(), d, grad + w.offset);
          be_->column_sum(d, pix, w.cols, grad + layers_[s.bias].offset);
          if (need_input_grad) {
            dcol_.reserve(pix * w.rows);
            be_->gemm(false, true, pix, w.rows, w.cols, d, params + w.offset, dcol_.data());
            be_->col2im(dcol_.data(), rows, s.conv, dprev);
          }
          break;
        }
        case Stage::Kind::Pool:
          if (need_input_grad) be_->maxpool_backward(d, argmax_[i].data(), rows, s.pool, dprev);
          break;
        case Stage::Kind::Dense: {
          const LayerView& w = layers_[s.weight];
          be_->gemm(true, false, w.rows, w.cols, rows, in, d, grad + w.offset);
          be_->column_sum(d, rows, w.cols, grad + layers_[s.bias].offset);
          if (need_input_grad) be_->gemm(false, true, rows, w.rows, w.cols, d, params + w.offset, dprev);
          break;
        }
      }
      if (need_input_grad && stages_[i - 1].relu) be_->relu_backward(dprev, acts_[i - 1].data(), rows * s.in);
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
    RUMOR_CHECK(d.dim == input_dim_, "data set width does not match the model");
    RUMOR_CHECK(d.classes > 0, "a cnn model needs a classification data set");
    const bool host = be_->host_memory();
    OutputScore score;
    for (std::size_t s = 0; s < d.rows; s += eval_chunk_) {
      const std::size_t n = std::min(eval_chunk_, d.rows - s);
      const float* xs = d.x.data() + s * d.dim;
      if (!host) {
        stage_x_.upload({xs, n * d.dim});
        xs = stage_x_.data();
      }
      forward(params, xs, n);
      const float* out = acts_.back().data();
      if (!host) {
        logits_.resize(n * output_dim_);
        be_->download(logits_.data(), out, n * output_dim_ * sizeof(float));
        out = logits_.data();
      }
      score.add(out, n, s, d, LossKind::SoftmaxCrossEntropy, output_dim_);
    }
    return score.result(d, LossKind::SoftmaxCrossEntropy);
  }

 private:
  void check_labels(const std::int32_t* labels, std::size_t rows) const {
    RUMOR_CHECK(labels != nullptr, "a cnn model needs class labels");
    for (std::size_t i = 0; i < rows; ++i)
      RUMOR_CHECK(labels[i] >= 0 && static_cast<std::size_t>(labels[i]) < output_dim_, "label out of range");
  }

  void forward(const float* params, const float* x, std::size_t rows) {
    for (std::size_t i = 0; i < stages_.size(); ++i) {
      const Stage& s = stages_[i];
      const float* in = i == 0 ? x : acts_[i - 1].data();
      Buffer<float>& a = acts_[i];
      a.reserve(rows * s.out);
      switch (s.kind) {
        case Stage::Kind::Conv: {
          const LayerView& w = layers_[s.weight];
          const std::size_t pix = rows * s.conv.out_h() * s.conv.out_w();
          cols_[i].reserve(pix * w.rows);
          be_->im2col(in, rows, s.conv, cols_[i].data());
          be_->gemm(false, false, pix, w.cols, w.rows, cols_[i].data(), params + w.offset, a.data());
          be_->bias_activation(a.data(), params + layers_[s.bias].offset, pix, w.cols, true);
          break;
        }
        case Stage::Kind::Pool:
          argmax_[i].reserve(rows * s.out);
          be_->maxpool_forward(in, rows, s.pool, a.data(), argmax_[i].data());
          break;
        case Stage::Kind::Dense: {
          const LayerView& w = layers_[s.weight];
          be_->gemm(false, false, rows, w.cols, w.rows, in, params + w.offset, a.data());
          be_->bias_activation(a.data(), params + layers_[s.bias].offset, rows, w.cols, s.relu);
          break;
        }
      }
    }
  }

  void add_params(Stage& s, const std::string& name, std::size_t rows, std::size_t cols) {
    s.weight = layers_.size();
    layers_.push_back({name + ".weight", count_, rows, cols});
    count_ += rows * cols;
    s.bias = layers_.size();
    layers_.push_back({name + ".bias", count_, 1, cols});
    count_ += cols;
  }

  void parse(const std::string& spec) {
    const std::string body = spec.substr(4);  // after "cnn:"
    std::vector<std::string> toks;
    for (std::size_t i = 0; i <= body.size();) {
      std::size_t j = body.find(',', i);
      if (j == std::string::npos) j = body.size();
      toks.push_back(body.substr(i, j - i));
      i = j + 1;
    }
    std::size_t h = 0, w = 0, c = 0;  // the current image shape; c == 0 once flattened
    std::size_t first = 0;
    if (!toks.empty() && !toks[0].empty() && toks[0][0] == 'i') {
      const std::string& t = toks[0];
      // "iHxWxC": reuse the token splitter on "iH" "xW" "xC".
      const auto parts = split_token(t);
      if (parts.size() != 3 || parts[1].first != 'x' || parts[2].first != 'x' || parts[0].second == 0 ||
          parts[1].second == 0 || parts[2].second == 0)
        bad_spec(spec, "token '" + t + "': expected the input shape iHxWxC, e.g. i28x28x1");
      const std::size_t a = parts[0].second, b = parts[1].second, d = parts[2].second;
      if (a * b * d != input_dim_)
        bad_spec(spec, "input shape '" + t + "' is " + std::to_string(a * b * d) + " values, the data has " +
                           std::to_string(input_dim_));
      h = a, w = b, c = d;
      first = 1;
    } else {
      const auto side = static_cast<std::size_t>(std::llround(std::sqrt(static_cast<double>(input_dim_))));
      if (side * side != input_dim_)
        bad_spec(spec, "the data's " + std::to_string(input_dim_) +
                           " features are not a square single-channel image; give the shape first, e.g. i32x32x3");
      h = w = side, c = 1;
    }
    fingerprint_ = "cnn:" + std::to_string(h) + "x" + std::to_string(w) + "x" + std::to_string(c);
    std::size_t convs = 0, denses = 0;
    if (toks.size() <= first) bad_spec(spec, "no layers");
    for (std::size_t ti = first; ti < toks.size(); ++ti) {
      const std::string& tok = toks[ti];
      const auto parts = split_token(tok);
      if (parts.empty()) bad_spec(spec, "token '" + tok + "' is not of the form cNkK[sS][pP], pK or fN");
      Stage s;
      const std::size_t in = c ? h * w * c : w;
      s.in = in;
      const char kind = parts[0].first;
      if (kind == 'c') {
        if (c == 0) bad_spec(spec, "token '" + tok + "': a convolution cannot follow a dense layer");
        std::size_t filters = parts[0].second, k = 0, stride = 1, pad = 0;
        bool seen_k = false, seen_s = false, seen_p = false;
        for (std::size_t p = 1; p < parts.size(); ++p) {
          auto [l, v] = parts[p];
          bool* seen = l == 'k' ? &seen_k : l == 's' ? &seen_s : l == 'p' ? &seen_p : nullptr;
          if (!seen || *seen || (l == 's' && p == 1) || (l == 'p' && p == 1))
            bad_spec(spec, "token '" + tok + "' is not of the form cNkK[sS][pP]");
          *seen = true;
          (l == 'k' ? k : l == 's' ? stride : pad) = v;
        }
        if (!seen_k || parts[1].first != 'k') bad_spec(spec, "token '" + tok + "': a convolution needs its kernel, cNkK");
        if (filters == 0 || filters > 65536 || k == 0 || stride == 0 || pad >= k)
          bad_spec(spec, "token '" + tok + "': need N >= 1, K >= 1, S >= 1 and P < K");
        s.kind = Stage::Kind::Conv;
        s.conv = ConvShape{h, w, c, k, stride, pad};
        if (h + 2 * pad < k || w + 2 * pad < k)
          bad_spec(spec, "token '" + tok + "': the kernel is larger than its " + std::to_string(h) + "x" +
                             std::to_string(w) + " input");
        h = s.conv.out_h(), w = s.conv.out_w(), c = filters;
        s.out = h * w * c;
        s.relu = true;
        add_params(s, "conv" + std::to_string(++convs), s.conv.patch(), filters);
        fingerprint_ += "-c" + std::to_string(filters) + "k" + std::to_string(k) + "s" + std::to_string(stride) + "p" +
                        std::to_string(pad);
      } else if (kind == 'p') {
        if (parts.size() != 1) bad_spec(spec, "token '" + tok + "' is not of the form pK");
        if (c == 0) bad_spec(spec, "token '" + tok + "': a pool cannot follow a dense layer");
        const std::size_t k = parts[0].second;
        if (k == 0 || k > h || k > w)
          bad_spec(spec, "token '" + tok + "': the pool window must be between 1 and its " + std::to_string(h) +
                             "x" + std::to_string(w) + " input");
        s.kind = Stage::Kind::Pool;
        s.pool = PoolShape{h, w, c, k};
        h = s.pool.out_h(), w = s.pool.out_w();
        s.out = h * w * c;
        // relu stays false: the ReLU mask is applied once, at the convolution below the pool.
        fingerprint_ += "-p" + std::to_string(k);
      } else if (kind == 'f') {
        if (parts.size() != 1 || parts[0].second == 0 || parts[0].second > (1u << 20))
          bad_spec(spec, "token '" + tok + "' is not of the form fN with N >= 1");
        s.kind = Stage::Kind::Dense;
        s.out = parts[0].second;
        s.relu = true;
        add_params(s, "fc" + std::to_string(++denses), in, s.out);
        h = 1, w = s.out, c = 0;
        fingerprint_ += "-f" + std::to_string(s.out);
      } else {
        bad_spec(spec, "token '" + tok + "' is not of the form cNkK[sS][pP], pK or fN");
      }
      stages_.push_back(s);
    }
    if (convs == 0) bad_spec(spec, "a cnn needs at least one convolution");
    // The output layer: dense to the classes, no ReLU.
    Stage out;
    out.kind = Stage::Kind::Dense;
    out.in = c ? h * w * c : w;
    out.out = output_dim_;
    add_params(out, "fc" + std::to_string(++denses), out.in, output_dim_);
    stages_.push_back(out);
    first_param_stage_ = 0;
    while (!stages_[first_param_stage_].has_params()) ++first_param_stage_;
    fingerprint_ += "-" + std::to_string(output_dim_) + "/ce/p" + std::to_string(count_) + "/f32";
  }

  std::shared_ptr<Backend> be_;
  std::size_t input_dim_, output_dim_;
  std::vector<Stage> stages_;
  std::vector<LayerView> layers_;
  std::size_t count_ = 0, first_param_stage_ = 0, eval_chunk_ = 1024;
  std::string fingerprint_;
  // In the backend's memory: acts_[i] = output of stage i; deltas_[i] = dLoss/d(output of
  // stage i) for i < last; delta_ = the output layer's; cols_[i] = a convolution's patches;
  // dcol_ = their gradient (shared); argmax_[i] = a pool's winners.
  std::vector<Buffer<float>> acts_, deltas_, cols_;
  std::vector<Buffer<std::int32_t>> argmax_;
  Buffer<float> delta_, dcol_;
  Buffer<float> stage_params_, stage_x_, stage_grad_;  // device backends: staged host data
  Buffer<std::int32_t> stage_labels_;
  std::vector<float> logits_;
};

}  // namespace

std::unique_ptr<Model> make_conv_model(const std::string& spec, std::size_t input_dim, std::size_t output_dim,
                                       std::shared_ptr<Backend> backend) {
  if (spec.rfind("cnn:", 0) != 0) throw std::invalid_argument("bad --model '" + spec + "': expected cnn:...");
  if (!backend) backend = make_cpu_backend();
  return std::make_unique<ConvNet>(spec, input_dim, output_dim, std::move(backend));
}

}  // namespace rumor
