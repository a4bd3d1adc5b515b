// The global gradient norm computed exactly, so that it does not depend on how the gradient
// is split over ranks and threads (dist.deterministic).
//
// Note [Exact sum of squares]
// A float sum depends on its order; this one does not. With 2^e above every |g| (one small
// max over the ranks), each g / 2^e squared is exact in fp64 (a 24-bit significand squared
// fits in 53 bits) and below 1; it is cut to a fixed point of 90 fractional bits (what falls
// below 2^-90 of the largest square is dropped, the same way wherever it is summed) and added
// as an integer. Integer sums are associative, so every split of the elements over ranks,
// shards and threads gives the same total, which is rounded to fp64 once. Each element's cut
// loses under 2^-88 of the largest square: far below what float rounding loses.
#pragma once

#include "dist/communicator.h"
#include "runtime/tensor.h"

namespace trainer::dist {

// The sum of squares of `grads` (fp32 or bf16, host memory): of this rank's elements, or,
// when `sharded`, of every rank's (a collective then). Infinite or NaN when any element is.
double exact_sum_squares(Communicator& comm, const ConstTensor& grads, bool sharded);

}  // namespace trainer::dist
