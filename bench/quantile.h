// bench/quantile.h: the one quantile rule of Ferry's benches (ferry-bench,
// hal_probe), so figures the scripts set side by side mean the same thing.
// Quantile(v, q) is the element at index min(size - 1, size x q / 1000)
// of `v` sorted (nearest rank, no interpolation); 0 for an empty `v`.
// Reorders `v` (nth_element). Median(v): the middle element of `v` sorted,
// the mean of the two middle ones for an even count, 0 for an empty `v`
// (the benches' ratio summaries). Header-only; no state.
#ifndef FERRY_BENCH_QUANTILE_H_
#define FERRY_BENCH_QUANTILE_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace ferry::bench {

inline uint64_t Quantile(std::vector<uint64_t>& v, uint64_t per_mille) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>((v.size() * per_mille) / 1000));
  std::nth_element(v.begin(), v.begin() + static_cast<ptrdiff_t>(i), v.end());
  return v[i];
}

inline double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

}  // namespace ferry::bench

#endif  // FERRY_BENCH_QUANTILE_H_
