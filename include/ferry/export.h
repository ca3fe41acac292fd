// include/ferry/export.h: FERRY_EXPORT, the mark on every symbol libferry's
// shared object exports.
//
// libferry is compiled with hidden visibility (meson gnu_symbol_visibility
// 'inlineshidden' on every library it is made of), so a symbol is visible
// to programs only when its declaration carries FERRY_EXPORT: the public
// API of include/ferry/ and nothing else (no engine internals, no
// simulator, no mutation switch). scripts/check-exports checks the
// installed library's dynamic symbol table against that rule.
//
// What must stay true: only headers under include/ferry/ use this macro.
#ifndef FERRY_INCLUDE_FERRY_EXPORT_H_
#define FERRY_INCLUDE_FERRY_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define FERRY_EXPORT __attribute__((visibility("default")))
#else
#define FERRY_EXPORT
#endif

#endif  // FERRY_INCLUDE_FERRY_EXPORT_H_
