// log.progress's choices, apart from the bar that draws them (app/metrics.h), so that the
// run's config (app/run_setup.h) names them without the metrics' dependencies.
#pragma once

#include <cstdint>

#include "runtime/enum_names.h"

namespace trainer::app {

// log.progress: a live bar when stdout is a terminal (automatic), always, or never.
enum class ProgressMode : uint8_t { automatic, on, off };
inline constexpr EnumNames<ProgressMode, 3> kProgressNames{
    "log.progress",
    {{{ProgressMode::automatic, "auto"}, {ProgressMode::on, "on"}, {ProgressMode::off, "off"}}}};

}  // namespace trainer::app
