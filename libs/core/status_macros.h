// Early-return helpers for absl::Status / absl::StatusOr. Our Abseil (20220623) has no
// ABSL_RETURN_IF_ERROR, so Corral carries these two.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define CORRAL_STATUS_CONCAT_INNER_(a, b) a##b
#define CORRAL_STATUS_CONCAT_(a, b) CORRAL_STATUS_CONCAT_INNER_(a, b)

// Evaluates `expr` (an absl::Status) once; returns it from the enclosing function if it is not OK.
#define CORRAL_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                       \
    if (::absl::Status corral_status_ = (expr); !corral_status_.ok()) return corral_status_; \
  } while (0)

// `CORRAL_ASSIGN_OR_RETURN(auto x, MaybeX());` — evaluates the StatusOr once; on error returns its status,
// otherwise moves the value into `lhs` (a declaration or an existing lvalue).
#define CORRAL_ASSIGN_OR_RETURN(lhs, rexpr) \
  CORRAL_ASSIGN_OR_RETURN_IMPL_(CORRAL_STATUS_CONCAT_(corral_statusor_, __COUNTER__), lhs, rexpr)

#define CORRAL_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                                  \
  if (!tmp.ok()) return std::move(tmp).status();       \
  lhs = std::move(tmp).value()
