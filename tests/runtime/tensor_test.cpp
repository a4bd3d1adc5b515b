// Tensor views (Note [Row stride], Note [Read-only views]): what a view of a view addresses,
// and that a read-only view stays read-only through every way of making another view.
#include "runtime/tensor.h"

#include <gtest/gtest.h>

#include <type_traits>

namespace trainer {
namespace {

// A read-only view never becomes a writable one, and its elements are const.
static_assert(std::is_convertible_v<Tensor, ConstTensor>);
static_assert(!std::is_convertible_v<ConstTensor, Tensor>);
static_assert(!std::is_constructible_v<Tensor, ConstTensor>);
static_assert(std::is_same_v<decltype(std::declval<ConstTensor>().as<float>()), const float*>);
static_assert(std::is_same_v<decltype(std::declval<Tensor>().as<float>()), float*>);
static_assert(std::is_same_v<decltype(std::declval<ConstTensor>().reshape({1})), ConstTensor>);
static_assert(std::is_same_v<decltype(std::declval<ConstTensor>().row_range(0, 1)), ConstTensor>);
static_assert(std::is_same_v<decltype(std::declval<ConstTensor>().col_range(0, 1)), ConstTensor>);
static_assert(std::is_same_v<decltype(std::declval<ConstTensor>().flat(0, 1)), ConstTensor>);
static_assert(std::is_same_v<decltype(make_tensor(std::declval<const float*>(), DType::f32, {1})),
                             ConstTensor>);

TEST(Tensor, ViewsOfAReadOnlyViewAddressTheSameElements) {
  const float data[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11};
  const ConstTensor t = make_tensor(data, DType::f32, {3, 4});
  const ConstTensor cols = t.col_range(1, 2);  // columns 1 and 2 of every row
  EXPECT_EQ(cols.ld(), 4);
  EXPECT_FALSE(cols.contiguous());
  const ConstTensor rows = cols.row_range(1, 2);  // rows 1 and 2 of those
  EXPECT_EQ(rows.as<float>()[0], 5.0f);
  EXPECT_EQ(rows.as<float>()[rows.ld() + 1], 10.0f);
  EXPECT_EQ(t.reshape({12}).flat(7, 3).as<float>()[2], 9.0f);
}

TEST(Tensor, AWritableViewReadOnlySeesWhatIsWritten) {
  float data[4] = {};
  const Tensor t = make_tensor(data, DType::f32, {2, 2});
  const ConstTensor r = t;
  t.as<float>()[3] = 7.0f;
  EXPECT_EQ(r.as<float>()[3], 7.0f);
  EXPECT_EQ(r.data, t.data);
  EXPECT_EQ(r.ndim, 2);
  EXPECT_EQ(r.dim(1), 2);
}

}  // namespace
}  // namespace trainer
