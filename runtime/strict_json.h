// JSON as the files the trainer reads must hold it: one object naming a member twice is refused,
// where nlohmann (as most parsers) would keep the last value silently.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace trainer {

// Parses `text`, read from `where` (a file, or file:line, for messages). Throws a UsageError
// "{where}: malformed JSON: ..." or "{where}: \"{name}\" is given twice in one object".
nlohmann::json parse_strict_json(std::string_view text, const std::string& where);

}  // namespace trainer
