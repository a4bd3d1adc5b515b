// Integers read from JSON files. nlohmann's get<T>() of a floating-point value, or of an
// integer outside T's range, is undefined behaviour or silently wrong; json_integer checks the
// value's kind and range first, so malformed files give a clean error.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string_view>
#include <type_traits>

#include "runtime/error.h"

namespace trainer {

// v as an integer of type T; throws trainer::Error naming `what` unless v is an integer
// (not a float, string, ...) within T's range.
template <typename T>
T json_integer(const nlohmann::json& v, std::string_view what) {
  static_assert(std::is_integral_v<T>);
  CHECK(v.is_number_integer(), "{} is not an integer ({})", what, v.dump());
  bool fits;
  if (v.is_number_unsigned())
    fits = v.get<uint64_t>() <= uint64_t(std::numeric_limits<T>::max());
  else
    fits = v.get<int64_t>() >= int64_t(std::numeric_limits<T>::min()) &&
           (std::is_unsigned_v<T> || v.get<int64_t>() <= int64_t(std::numeric_limits<T>::max()));
  CHECK(fits, "{} = {} is out of range", what, v.dump());
  return v.is_number_unsigned() ? T(v.get<uint64_t>()) : T(v.get<int64_t>());
}

// The integer member `key` of the object j (throws when it is absent or not an integer).
template <typename T>
T json_integer_at(const nlohmann::json& j, const char* key) {
  CHECK(j.is_object() && j.contains(key), "no integer '{}'", key);
  return json_integer<T>(j.at(key), key);
}

}  // namespace trainer
