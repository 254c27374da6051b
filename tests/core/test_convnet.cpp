// Convolutional models (core/convnet.cpp) and the backend's convolution and pooling operations:
// every layer's gradient against central finite differences, the spec grammar and its errors,
// the fingerprint, the primitives' contracts (im2col/col2im adjoint, pooling ties and floor),
// the emulated device, and a CNN learning a synthetic image task.
//
// Gradients: the model's (float) analytic gradient of every parameter against central finite
// differences (h = 1e-6) of an independent double-precision reference of the same network
// (direct convolution loops, built from the fingerprint): |fd - g| / max(1e-3, |fd| + |g|)
// < 1e-3 for every parameter, and the losses agree within 1e-5 relative. (Differencing the
// float model itself, as the dense test does, needs h ~ 1e-3, which crosses ReLU and max-pool
// kinks often enough in a CNN to fail on correct code.)
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <cmath>
#include <map>
#include <vector>

#include "core/backend.hpp"
#include "core/model.hpp"
#include "core/trainer.hpp"
#include "data/dataset.hpp"

using namespace rumor;

namespace {

// An independent reference: the network the fingerprint spells out (cnn:HxWxC-cNkKsSpP-pK-fN-
// ...-CLASSES/...), evaluated in double by direct loops (no im2col, no GEMM), one sample at a
// time, reading the flat parameters in the documented layout. Returns the mean loss.
double reference_loss(const std::string& fingerprint, const std::vector<double>& p, const std::vector<float>& x,
                      const std::vector<std::int32_t>& y, std::size_t B) {
  std::vector<std::string> toks;
  const std::string arch = fingerprint.substr(4, fingerprint.find('/') - 4);
  for (std::size_t i = 0; i <= arch.size();) {
    std::size_t j = arch.find('-', i);
    if (j == std::string::npos) j = arch.size();
    toks.push_back(arch.substr(i, j - i));
    i = j + 1;
  }
  std::size_t H0 = 0, W0 = 0, C0 = 0;
  REQUIRE(std::sscanf(toks[0].c_str(), "%zux%zux%zu", &H0, &W0, &C0) == 3);
  const std::size_t classes = std::stoul(toks.back());
  double total = 0;
  for (std::size_t b = 0; b < B; ++b) {
    std::size_t h = H0, w = W0, c = C0, off = 0;
    std::vector<double> a(x.begin() + static_cast<std::ptrdiff_t>(b * h * w * c),
                          x.begin() + static_cast<std::ptrdiff_t>((b + 1) * h * w * c));
    auto dense = [&](std::size_t out, bool relu) {
      const std::size_t in = a.size();
      std::vector<double> z(out);
      for (std::size_t j = 0; j < out; ++j) {
        double v = p[off + in * out + j];
        for (std::size_t i = 0; i < in; ++i) v += a[i] * p[off + i * out + j];
        z[j] = relu ? std::max(v, 0.0) : v;
      }
      off += in * out + out;
      a = z;
    };
    for (std::size_t t = 1; t + 1 < toks.size(); ++t) {
      const std::string& tok = toks[t];
      std::size_t n = 0, k = 0, s = 0, pad = 0;
      if (std::sscanf(tok.c_str(), "c%zuk%zus%zup%zu", &n, &k, &s, &pad) == 4) {
        const std::size_t oh_n = (h + 2 * pad - k) / s + 1, ow_n = (w + 2 * pad - k) / s + 1;
        std::vector<double> z(oh_n * ow_n * n);
        for (std::size_t oh = 0; oh < oh_n; ++oh)
          for (std::size_t ow = 0; ow < ow_n; ++ow)
            for (std::size_t f = 0; f < n; ++f) {
              double v = p[off + k * k * c * n + f];
              for (std::size_t kh = 0; kh < k; ++kh)
                for (std::size_t kw = 0; kw < k; ++kw)
                  for (std::size_t ch = 0; ch < c; ++ch) {
                    const long ih = long(oh * s + kh) - long(pad), iw = long(ow * s + kw) - long(pad);
                    if (ih < 0 || iw < 0 || ih >= long(h) || iw >= long(w)) continue;
                    v += a[(std::size_t(ih) * w + std::size_t(iw)) * c + ch] * p[off + ((kh * k + kw) * c + ch) * n + f];
                  }
              z[(oh * ow_n + ow) * n + f] = std::max(v, 0.0);
            }
        off += k * k * c * n + n;
        a = z, h = oh_n, w = ow_n, c = n;
      } else if (std::sscanf(tok.c_str(), "p%zu", &k) == 1) {
        std::vector<double> z((h / k) * (w / k) * c, -1e300);
        for (std::size_t oh = 0; oh < h / k; ++oh)
          for (std::size_t ow = 0; ow < w / k; ++ow)
            for (std::size_t ch = 0; ch < c; ++ch)
              for (std::size_t kh = 0; kh < k; ++kh)
                for (std::size_t kw = 0; kw < k; ++kw)
                  z[(oh * (w / k) + ow) * c + ch] =
                      std::max(z[(oh * (w / k) + ow) * c + ch], a[((oh * k + kh) * w + ow * k + kw) * c + ch]);
        a = z, h /= k, w /= k;
      } else {
        REQUIRE(std::sscanf(tok.c_str(), "f%zu", &n) == 1);
        dense(n, true);
      }
    }
    dense(classes, false);
    REQUIRE(off == p.size());
    const double m = *std::max_element(a.begin(), a.end());
    double se = 0;
    for (double v : a) se += std::exp(v - m);
    total += std::log(se) + m - a[static_cast<std::size_t>(y[b])];
  }
  return total / static_cast<double>(B);
}

// The model's float gradient against central differences (h = 1e-6) of the double reference,
// every parameter; and its loss against the reference's. The reference is smooth except at
// ReLU and pooling kinks, which a 1e-6 step crosses with negligible probability.
void check_cnn_gradients(const std::string& spec, std::size_t in, std::size_t out) {
  auto m = make_model(spec, in, out);
  Rng rng(11);
  std::vector<float> p(m->param_count()), g(m->param_count());
  m->init(p, rng);
  for (auto& v : p) v += static_cast<float>(rng.normal(0, 0.05));  // biases off zero
  const std::size_t B = 3;
  std::vector<float> x(B * in);
  std::vector<std::int32_t> y(B);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  for (auto& v : y) v = static_cast<std::int32_t>(rng.below(out));
  const double loss = m->loss_and_grad(p, x.data(), B, y.data(), nullptr, g);
  std::vector<double> pd(p.begin(), p.end());
  const double ref = reference_loss(m->fingerprint(), pd, x, y, B);
  INFO(spec << " loss " << loss << " reference " << ref);
  CHECK(std::abs(loss - ref) <= 1e-5 * std::abs(ref));
  const double h = 1e-6;
  for (const LayerView& l : m->layers()) {
    double worst = 0;
    for (std::size_t i = l.offset; i < l.offset + l.size(); ++i) {
      const double keep = pd[i];
      pd[i] = keep + h;
      const double lp = reference_loss(m->fingerprint(), pd, x, y, B);
      pd[i] = keep - h;
      const double lm = reference_loss(m->fingerprint(), pd, x, y, B);
      pd[i] = keep;
      const double fd = (lp - lm) / (2 * h);
      worst = std::max(worst, std::abs(fd - g[i]) / std::max(1e-3, std::abs(fd) + std::abs(g[i])));
    }
    INFO(spec << " " << l.name << " max relative gradient error " << worst);
    CHECK(worst < 1e-3);
  }
}

// Four classes of 12x12 images: a horizontal, vertical, diagonal or anti-diagonal stroke of 5
// pixels at a random place, plus Gaussian noise. Position varies, shape decides the class.
Dataset strokes(std::size_t rows, std::uint64_t seed) {
  Rng rng(seed);
  Dataset d;
  d.name = "strokes";
  d.rows = rows;
  d.dim = 144;
  d.classes = 4;
  d.x.resize(rows * 144);
  d.labels.resize(rows);
  for (std::size_t r = 0; r < rows; ++r) {
    const int c = static_cast<int>(rng.below(4));
    d.labels[r] = c;
    float* img = d.x.data() + r * 144;
    for (std::size_t i = 0; i < 144; ++i) img[i] = static_cast<float>(rng.normal(0, 0.3));
    const int h0 = static_cast<int>(rng.below(8)), w0 = static_cast<int>(rng.below(8));
    for (int k = 0; k < 5; ++k) {
      const int dh[4] = {0, k, k, k}, dw[4] = {k, 0, k, 4 - k};
      img[(h0 + dh[c]) * 12 + w0 + dw[c]] += 1.0f;
    }
  }
  return d;
}

}  // namespace

TEST_CASE("cnn: every layer's gradient matches finite differences (odd sizes, stride 2, padding)") {
  // 7x7x2 input, 3x3 conv stride 2 padding 1 -> 4x4x3, 2x2 pool -> 2x2x3, dense 5, output 4.
  check_cnn_gradients("cnn:i7x7x2,c3k3s2p1,p2,f5", 98, 4);
  // 9x9: conv 3x3 -> 7x7x4, pool 2 drops the odd row and column -> 3x3x4, conv 2x2 padding 1
  // -> 4x4x5, dense 6, output 3.
  check_cnn_gradients("cnn:c4k3,p2,c5k2p1,f6", 81, 3);
  // Non-square 5x6x3 input, 5x5 conv padding 2 (same size) straight into the output layer.
  check_cnn_gradients("cnn:i5x6x3,c2k5p2", 90, 3);
  // A pool first (nothing to differentiate below it), a 3x3 pool, stride 3 conv.
  check_cnn_gradients("cnn:p2,c3k3,p3", 144, 2);
  check_cnn_gradients("cnn:i9x9x1,c2k3s3p1,c3k2", 81, 2);
}

TEST_CASE("cnn: layers are contiguous views, the fingerprint spells the whole spec") {
  auto m = make_model("cnn:c32k5,p2,c64k5,p2,f1024", 784, 10);
  const std::size_t want = (25 * 32 + 32) + (800 * 64 + 64) + (1024 * 1024 + 1024) + (1024 * 10 + 10);
  CHECK(m->param_count() == want);
  std::size_t off = 0;
  std::vector<std::string> names;
  for (const auto& l : m->layers()) {
    CHECK(l.offset == off);
    off += l.size();
    names.push_back(l.name);
  }
  CHECK(off == want);
  CHECK(names == std::vector<std::string>{"conv1.weight", "conv1.bias", "conv2.weight", "conv2.bias", "fc1.weight",
                                          "fc1.bias", "fc2.weight", "fc2.bias"});
  CHECK(m->layers()[2].rows == 5 * 5 * 32);
  CHECK(m->layers()[4].rows == 4 * 4 * 64);
  CHECK(m->fingerprint() == "cnn:28x28x1-c32k5s1p0-p2-c64k5s1p0-p2-f1024-10/ce/p" + std::to_string(want) + "/f32");
  // The same network written out in full has the same fingerprint ...
  CHECK(make_model("cnn:i28x28x1,c32k5s1p0,p2,c64k5,p2,f1024", 784, 10)->fingerprint() == m->fingerprint());
  // ... and every change is seen, including ones that keep the parameter count.
  for (const char* other : {"cnn:c32k5,p2,c64k5,p2,f512", "cnn:c32k5p2,p2,c64k5,p2,f1024", "cnn:c32k5,p2,c64k5,p2,f1024,f10",
                            "cnn:c32k5s2,p2,c64k5,f1024", "cnn:c32k5,p2,c64k5,f1024", "cnn:c32k5,p4,c64k5,f1024"}) {
    INFO(other);
    CHECK(make_model(other, 784, 10)->fingerprint() != m->fingerprint());
  }
  CHECK(make_model("cnn:i28x28x1,c4k3", 784, 10)->fingerprint() != make_model("cnn:i14x56x1,c4k3", 784, 10)->fingerprint());
}

TEST_CASE("cnn: bad specs are refused naming the bad token") {
  auto refuses = [](const std::string& spec, std::size_t in, const std::string& says) {
    INFO(spec);
    CHECK_THROWS_WITH_AS(make_model(spec, in, 10), doctest::Contains(says.c_str()), std::invalid_argument);
  };
  refuses("cnn:", 784, "cNkK");
  refuses("cnn:c32", 784, "'c32'");
  refuses("cnn:c32k5,q2", 784, "'q2'");
  refuses("cnn:c32k5,p2,,f10", 784, "''");
  refuses("cnn:c32k0", 784, "'c32k0'");
  refuses("cnn:c32k3p3", 784, "'c32k3p3'");
  refuses("cnn:c32k5s0", 784, "'c32k5s0'");
  refuses("cnn:c32k5,f10,c3k3", 784, "'c3k3'");
  refuses("cnn:c32k5,f10,p2", 784, "'p2'");
  refuses("cnn:c32k29", 784, "'c32k29'");
  refuses("cnn:c32k5,p30", 784, "'p30'");
  refuses("cnn:f10", 784, "at least one convolution");
  refuses("cnn:c4k3", 785, "not a square");
  refuses("cnn:i28x28x3,c4k3", 784, "i28x28x3");
  refuses("cnn:i28x28,c4k3", 784, "'i28x28'");
  refuses("cnn:c32k5x", 784, "'c32k5x'");
}

TEST_CASE("cnn backend: col2im is im2col's adjoint, pooling takes the first maximum and drops partial tiles") {
  CpuBackend be;
  Rng rng(3);
  for (const ConvShape s : {ConvShape{5, 7, 3, 3, 2, 1}, ConvShape{6, 6, 2, 4, 1, 3}, ConvShape{4, 5, 1, 2, 3, 0}}) {
    const std::size_t B = 2, n = B * s.in_h * s.in_w * s.in_c, m = B * s.out_h() * s.out_w() * s.patch();
    std::vector<float> x(n), y(m), col(m), back(n);
    for (auto& v : x) v = static_cast<float>(rng.normal());
    for (auto& v : y) v = static_cast<float>(rng.normal());
    be.im2col(x.data(), B, s, col.data());
    be.col2im(y.data(), B, s, back.data());
    double a = 0, b = 0;
    for (std::size_t i = 0; i < m; ++i) a += double(col[i]) * y[i];
    for (std::size_t i = 0; i < n; ++i) b += double(x[i]) * back[i];
    CHECK(a == doctest::Approx(b).epsilon(1e-5));
  }
  // im2col by hand: 3x3 single-channel image, 2x2 kernel, padding 1, stride 2 -> 2x2 outputs.
  {
    const ConvShape s{3, 3, 1, 2, 2, 1};
    const std::vector<float> x{1, 2, 3, 4, 5, 6, 7, 8, 9};
    std::vector<float> col(4 * 4);
    be.im2col(x.data(), 1, s, col.data());
    CHECK(col == std::vector<float>{0, 0, 0, 1, 0, 0, 2, 3, 0, 4, 0, 7, 5, 6, 8, 9});
  }
  // Pooling: 3x5 input, 2 channels, window 2 -> 1x2 (the last row and column dropped).
  const PoolShape p{3, 5, 2, 2};
  std::vector<float> x(30);
  for (std::size_t i = 0; i < 30; ++i) x[i] = static_cast<float>(i % 7);
  x[0] = x[2] = 9;   // a tie in channel 0 of the first tile: the first wins
  x[28] = 100;       // in the dropped column: never chosen
  std::vector<float> y(4), dx(30), dy{1, 2, 3, 4};
  std::vector<std::int32_t> am(4);
  be.maxpool_forward(x.data(), 1, p, y.data(), am.data());
  CHECK(y[0] == 9);
  CHECK(am[0] == 0);
  for (std::size_t i = 0; i < 4; ++i) {
    const std::size_t oh = 0, ow = i / 2, c = i % 2;
    float want = -1;
    for (std::size_t kh = 0; kh < 2; ++kh)
      for (std::size_t kw = 0; kw < 2; ++kw) want = std::max(want, x[((oh * 2 + kh) * 5 + ow * 2 + kw) * 2 + c]);
    CHECK(y[i] == want);
    CHECK(x[static_cast<std::size_t>(am[i])] == want);
  }
  be.maxpool_backward(dy.data(), am.data(), 1, p, dx.data());
  float total = 0;
  for (std::size_t i = 0; i < 30; ++i) total += dx[i];
  CHECK(total == 10);
  for (std::size_t i = 0; i < 4; ++i) CHECK(dx[static_cast<std::size_t>(am[i])] == dy[i]);
}

TEST_CASE("cnn: the emulated device computes the CPU's loss, gradient and evaluation bit for bit") {
  const std::string spec = "cnn:c4k3p1,p2,c6k3s2,f8";
  auto cpu = make_model(spec, 144, 4);
  auto emu = make_model(spec, 144, 4, std::make_shared<EmulatedDevice>());
  CHECK(cpu->fingerprint() == emu->fingerprint());
  Rng rng(5);
  std::vector<float> p(cpu->param_count()), g1(p.size()), g2(p.size());
  cpu->init(p, rng);
  const Dataset d = strokes(50, 9);
  const double l1 = cpu->loss_and_grad(p, d.x.data(), 50, d.labels.data(), nullptr, g1);
  const double l2 = emu->loss_and_grad(p, d.x.data(), 50, d.labels.data(), nullptr, g2);
  CHECK(l1 == l2);
  CHECK(g1 == g2);
  const EvalResult e1 = cpu->evaluate(p, d), e2 = emu->evaluate(p, d);
  CHECK(e1.loss == e2.loss);
  CHECK(e1.accuracy == e2.accuracy);
}

TEST_CASE("cnn: a small CNN learns a synthetic image task (>= 0.93 test accuracy in 1000 steps, it reaches 0.954)") {
  auto train = std::make_shared<Dataset>(strokes(4000, 1));
  const Dataset test = strokes(1000, 2);
  TrainerConfig tc;
  tc.model = "cnn:c8k3,p2,f32";
  tc.optimizer.kind = "adam";
  tc.schedule.base_lr = 3e-3;
  tc.batch = 32;
  tc.seed = 4;
  Trainer t(tc, train, 144, 4);
  const double before = t.evaluate(test).accuracy;
  for (int i = 0; i < 1000; ++i) t.step();
  const EvalResult after = t.evaluate(test);
  INFO("accuracy " << before << " -> " << after.accuracy << ", loss " << after.loss);
  CHECK(before < 0.4);
  CHECK(after.accuracy >= 0.93);
}
