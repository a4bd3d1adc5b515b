// Finite-difference gradient checking for float ops: central differences of a scalar loss
// computed in double, compared with the analytic gradient under a tolerance that scales with
// the gradient's magnitude.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "runtime/rng.h"

namespace trainer::testing {

inline std::vector<float> random_vector(size_t n, uint64_t seed, float std = 1.0f) {
  std::vector<float> v(n);
  fill_normal(v.data(), int64_t(n), seed, 0.0f, std);
  return v;
}

// Sum of out[i] * weights[i] in double: the scalar whose gradient w.r.t. out is `weights`.
inline double weighted_sum(const float* out, const std::vector<float>& weights) {
  double s = 0;
  for (size_t i = 0; i < weights.size(); ++i) s += double(out[i]) * weights[i];
  return s;
}

// Checks analytic[i] against d loss / d x[i] for up to max_checks evenly spread indices.
// atol covers float rounding in the loss, which grows with its magnitude over eps.
// `loss` must recompute the forward from the current contents of x.
// The defaults: rtol 3e-3 covers the eps^2 truncation (<= 3e-6 on LayerNorm at eps 1e-2); the
// floor rtol (1e-2 scale) + atol covers the loss's fp32 rounding over 2 eps, Gaussian noise
// that reached 0.5 of the tolerance in 4800 LayerNorm elements emulated in numpy (0.25 for
// attention): ~7 sigma to fail, and another CPU's summation order is just another draw. A
// wrong term or sign is O(1) relative.
inline void expect_gradient(const std::string& what, std::vector<float>& x,
                            const std::vector<float>& analytic, const std::function<double()>& loss,
                            int max_checks = 64, float eps = 1e-2f, double rtol = 3e-3,
                            double atol = 1e-5) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  double scale = 0;
  for (float g : analytic) scale = std::max(scale, std::abs(double(g)));
  const size_t stride = std::max<size_t>(1, x.size() / size_t(max_checks));
  int bad = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    float saved = x[i];
    x[i] = saved + eps;
    double up = loss();
    x[i] = saved - eps;
    double down = loss();
    x[i] = saved;
    double numeric = (up - down) / (2.0 * double(eps));
    double tol = rtol * (std::abs(numeric) + 1e-2 * scale) + atol;
    if (std::abs(numeric - analytic[i]) > tol && bad++ < 5)
      ADD_FAILURE() << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric;
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " mismatches";
}

}  // namespace trainer::testing
