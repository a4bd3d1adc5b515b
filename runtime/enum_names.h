// One table per enum of its values and their names, from which its parser, its printer and the
// configuration schema's choices all come: a value is named in one place.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "runtime/error.h"

namespace trainer {

template <typename E>
struct EnumName {
  E value;
  const char* name;
};

template <typename E, size_t N>
struct EnumNames {
  const char* what;  // what the value sets, for errors: "model.activation_checkpointing"
  std::array<EnumName<E>, N> entries;

  // The name of `value` ("?" for a value the table lacks, which is a bug).
  constexpr const char* name(E value) const {
    for (const EnumName<E>& e : entries)
      if (e.value == value) return e.name;
    return "?";
  }
  // The value called `text`; throws UsageError naming `what` and every name otherwise.
  E parse(std::string_view text) const {
    for (const EnumName<E>& e : entries)
      if (text == e.name) return e.value;
    std::string all;
    for (const EnumName<E>& e : entries) all += std::string(all.empty() ? "" : ", ") + e.name;
    throw UsageError(fmt::format("{} must be one of {}, got '{}'", what, all, text));
  }
  // Every name, in the table's order (the schema's choices).
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const EnumName<E>& e : entries) out.push_back(e.name);
    return out;
  }
};

}  // namespace trainer
