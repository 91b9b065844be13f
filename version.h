#pragma once

// weft's version, as <weft/version.h>. The numbers here are the only place the version is
// written: CMake's project(), the package version file, weft.pc and the Conan recipe read
// them from this header.
//
// Compatibility (docs/versioning.md): within one major version, code that uses only the
// public API (names outside weft::detail, headers outside detail/) keeps compiling and
// behaving as documented; a minor version may add to it and deprecate, a patch version
// only fixes. weft is built as static libraries: rebuild everything that links it when
// weft changes (no ABI promise).

/// Major version: changes when a public API changes incompatibly.
#define WEFT_VERSION_MAJOR 1
/// Minor version: new features and deprecations, source compatible.
#define WEFT_VERSION_MINOR 0
/// Patch version: fixes only.
#define WEFT_VERSION_PATCH 0

/// The version as one comparable number: major * 10000 + minor * 100 + patch.
#define WEFT_VERSION (WEFT_VERSION_MAJOR * 10000 + WEFT_VERSION_MINOR * 100 + WEFT_VERSION_PATCH)
/// The version as a string literal, "major.minor.patch".
#define WEFT_VERSION_STRING                                                   \
  WEFT_DETAIL_VERSION_TEXT(WEFT_VERSION_MAJOR) "." WEFT_DETAIL_VERSION_TEXT( \
      WEFT_VERSION_MINOR) "." WEFT_DETAIL_VERSION_TEXT(WEFT_VERSION_PATCH)

#define WEFT_DETAIL_VERSION_TEXT(n) WEFT_DETAIL_VERSION_TEXT_OF(n)
#define WEFT_DETAIL_VERSION_TEXT_OF(n) #n
