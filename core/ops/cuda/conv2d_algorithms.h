// Which cuDNN convolution algorithm conv2d runs, as pure host logic (no CUDA header, so the CPU
// tests check it without a GPU; core/ops/cuda/conv2d.cu feeds it cuDNN's answers).
//
// cudnnGet*Algorithm_v7 ranks algorithms by heuristics only: it runs nothing, and an algorithm
// it offers with CUDNN_STATUS_SUCCESS can still fail when executed for some shape and dtype
// (NOT_SUPPORTED, BAD_PARAM or EXECUTION_FAILED; some FFT and Winograd variants with bf16 or
// large workspaces are known to). So each direction of a plan keeps its ordered candidates, and
// its first execution, which must not be inside a CUDA-graph capture, tries them in order and
// keeps the first that runs; the rest of the run uses that one. The order depends only on
// cuDNN's answer, so a given cuDNN on a given GPU always chooses the same algorithm.
//
// The heuristics' first pick is often not the fastest (fp32 most of all), so with
// --conv-algorithms measured the first execution times the candidates (cudnnFind*AlgorithmEx)
// and tries the fastest first; that choice is kept (conv2d_algorithm_db.h) so reruns agree.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace alloy::cuda {

// Alloy's own kernels (conv2d_direct.h, conv2d_implicit_gemm.h), offered beside cuDNN's
// algorithms in every direction they support under this number, past every
// cudnnConvolution*Algo_t value; they are deterministic and need no math type, so theirs names
// the kernel (the constants below).
constexpr int kDirectAlgorithm = 100;
constexpr const char* kDirectAlgorithmName = "ALLOY_DIRECT";
// The forward's: the streaming direct kernel, the one that splits its channels over warp
// groups, the implicit GEMM. The filter gradient's: the direct kernel, the implicit GEMM. The
// input gradient has the direct kernel only (0).
constexpr int kStreamingForward = 0, kSplitForward = 1, kImplicitGemmForward = 2;
constexpr int kDirectFilter = 0, kImplicitGemmFilter = 1;

// The name of Alloy's kernel `kernel` of a direction ("forward", "data" or "filter", as the
// algorithm db words them), for messages and reports.
inline std::string alloy_kernel_name(const std::string& direction, int kernel) {
  const char* which = "";
  if (direction == "forward" && kernel == kSplitForward)
    which = ", channels split over warp groups";
  if ((direction == "forward" && kernel == kImplicitGemmForward) ||
      (direction == "filter" && kernel == kImplicitGemmFilter)) {
    which = ", implicit GEMM";
  }
  return detail::concat(kDirectAlgorithmName, " (Alloy's fp32-accumulating kernels", which, ")");
}

// cuDNN's names of its algorithms by cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t value, and
// ours for kDirectAlgorithm, for messages and reports; "?" for a value this list does not know.
inline const char* forward_algorithm_name(int algo) {
  constexpr const char* names[] = {
      "IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  if (algo == kDirectAlgorithm) return kDirectAlgorithmName;
  return algo >= 0 && algo < 8 ? names[algo] : "?";
}

inline const char* data_algorithm_name(int algo) {
  constexpr const char* names[] = {"ALGO_0",     "ALGO_1",   "FFT",
                                   "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  if (algo == kDirectAlgorithm) return kDirectAlgorithmName;
  return algo >= 0 && algo < 6 ? names[algo] : "?";
}

inline const char* filter_algorithm_name(int algo) {
  constexpr const char* names[] = {
      "ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  if (algo == kDirectAlgorithm) return kDirectAlgorithmName;
  return algo >= 0 && algo < 7 ? names[algo] : "?";
}

// One entry of cuDNN's answer, in cuDNN's order (fastest first, by its estimate).
struct AlgorithmOffer {
  int algo = 0;          // cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t
  int math_type = 0;     // cudnnMathType_t the algorithm runs with
  std::string name;      // for messages: "IMPLICIT_PRECOMP_GEMM (tensor-op math)"
  bool offered = false;  // its status was CUDNN_STATUS_SUCCESS
  std::size_t workspace = 0;
  bool deterministic = false;
  float milliseconds = 0.0f;  // cudnnFind*AlgorithmEx's measurement; the heuristics give none
};

// The offers to try, in order: those cuDNN offered, within `workspace_limit`, each (algorithm,
// math type) once; with `prefer_deterministic` (the backward passes, so that reruns give equal
// bits) the deterministic ones first and the others after them, as a last resort; cuDNN's order
// within each group.
inline std::vector<AlgorithmOffer> algorithm_candidates(const std::vector<AlgorithmOffer>& offers,
                                                        bool prefer_deterministic,
                                                        std::size_t workspace_limit) {
  std::vector<AlgorithmOffer> first, last;
  const auto seen = [&](const AlgorithmOffer& offer) {
    for (const auto* group : {&first, &last}) {
      for (const AlgorithmOffer& kept : *group) {
        if (kept.algo == offer.algo && kept.math_type == offer.math_type) return true;
      }
    }
    return false;
  };
  for (const AlgorithmOffer& offer : offers) {
    if (!offer.offered || offer.workspace > workspace_limit || seen(offer)) continue;
    (!prefer_deterministic || offer.deterministic ? first : last).push_back(offer);
  }
  first.insert(first.end(), last.begin(), last.end());
  return first;
}

// Runs `attempt` on the candidates in order until one returns an empty string (it worked; its
// index is returned); a non-empty string is why that one failed. When none works, or there is
// none, throws Error naming `what` (the direction, dtype and shape) and every algorithm tried
// with its failure.
inline std::size_t first_working_algorithm(
    const std::vector<AlgorithmOffer>& candidates, const std::string& what,
    const std::function<std::string(const AlgorithmOffer&)>& attempt) {
  ALLOY_CHECK(!candidates.empty(), what,
              ": cuDNN offers no algorithm for it within the workspace limit");
  std::string tried;
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    const std::string failure = attempt(candidates[i]);
    if (failure.empty()) return i;
    tried += detail::concat(i == 0 ? "" : "; ", "algorithm ", candidates[i].algo, " ",
                            candidates[i].name, ": ", failure);
  }
  fail(what, ": none of the ", candidates.size(), " algorithms cuDNN offers runs (", tried, ")");
}

// The position in `candidates` of the algorithm with `algo` and `math_type`, if it is one.
inline std::optional<std::size_t> candidate_index(const std::vector<AlgorithmOffer>& candidates,
                                                  int algo, int math_type) {
  for (std::size_t i = 0; i < candidates.size(); ++i) {
    if (candidates[i].algo == algo && candidates[i].math_type == math_type) return i;
  }
  return std::nullopt;
}

// --conv-algorithms measured: the positions in `candidates` of the (at most) `count` offers
// cudnnFind*AlgorithmEx timed fastest, fastest first. Only offers in `timed` (Find's results)
// that ran (status SUCCESS), need at most `workspace_limit`, are deterministic when
// `require_deterministic` (the backward passes: a rerun must give equal bits) and are among the
// candidates count: a choice kept in the algorithm db is then found again among a later run's
// candidates. Empty when no offer qualifies.
inline std::vector<std::size_t> fastest_candidates(const std::vector<AlgorithmOffer>& candidates,
                                                   const std::vector<AlgorithmOffer>& timed,
                                                   bool require_deterministic,
                                                   std::size_t workspace_limit, std::size_t count) {
  std::vector<std::pair<float, std::size_t>> qualifying;  // (Find's milliseconds, index)
  for (const AlgorithmOffer& offer : timed) {
    if (!offer.offered || offer.workspace > workspace_limit || offer.milliseconds < 0.0f ||
        (require_deterministic && !offer.deterministic)) {
      continue;
    }
    const std::optional<std::size_t> index =
        candidate_index(candidates, offer.algo, offer.math_type);
    if (!index) continue;
    const bool seen = std::any_of(qualifying.begin(), qualifying.end(),
                                  [&](const auto& q) { return q.second == *index; });
    if (!seen) qualifying.emplace_back(offer.milliseconds, *index);
  }
  // Stable: equal times keep Find's order.
  std::stable_sort(qualifying.begin(), qualifying.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<std::size_t> fastest;
  for (std::size_t i = 0; i < qualifying.size() && i < count; ++i)
    fastest.push_back(qualifying[i].second);
  return fastest;
}

// `candidates` with the one at `index` moved to the front: tried first, the others (in their
// order) stay the fallback should it fail to run.
inline std::vector<AlgorithmOffer> put_first(std::vector<AlgorithmOffer> candidates,
                                             std::size_t index) {
  std::rotate(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(index),
              candidates.begin() + static_cast<std::ptrdiff_t>(index) + 1);
  return candidates;
}

}  // namespace alloy::cuda
