// base/string_view.h: AV(), the one bridge from std::string_view to
// absl::string_view.
//
// Bookworm's Abseil (20220623) is built with its own string_view type, so
// absl::StrCat and friends take absl::string_view, not std::string_view.
// What must stay true: AV copies no bytes (same data, same size).
#ifndef FERRY_BASE_STRING_VIEW_H_
#define FERRY_BASE_STRING_VIEW_H_

#include <string_view>

#include "absl/strings/string_view.h"

namespace ferry::base {

inline absl::string_view AV(std::string_view s) { return absl::string_view(s.data(), s.size()); }

}  // namespace ferry::base

#endif  // FERRY_BASE_STRING_VIEW_H_
