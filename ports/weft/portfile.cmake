# vcpkg port of weft, kept in weft's repository as an overlay port that builds the
# checkout it lives in (ports/weft/../..):
#   vcpkg install weft --overlay-ports=<weft checkout>/ports
# A port in a registry fetches a release instead of the line below, e.g.
#   vcpkg_from_github(OUT_SOURCE_PATH SOURCE_PATH REPO <owner>/weft REF "v${VERSION}"
#                     SHA512 <sha512 of that archive> HEAD_REF main)
# The version in vcpkg.json must match version.h (test/consumer/run.sh vcpkg checks it).
get_filename_component(SOURCE_PATH "${CMAKE_CURRENT_LIST_DIR}/../.." ABSOLUTE)

# weft builds static libraries only.
vcpkg_check_linkage(ONLY_STATIC_LIBRARY)

# tls: WEFT_TLS=ON (vcpkg's openssl, found through its toolchain) or OFF, never weft's
# AUTO, which could pick up an OpenSSL of the system's outside vcpkg.
vcpkg_check_features(OUT_FEATURE_OPTIONS FEATURE_OPTIONS
    FEATURES
        io-uring WEFT_IO_URING
        task-tracking WEFT_TASK_TRACKING
        tls WEFT_TLS
)
# Without the feature, WEFT_FIBER_BACKEND keeps weft's default: its own assembly on
# x86-64 and aarch64 Linux, Boost.Context elsewhere (which then needs the feature).
set(backend_options "")
if("boost-context" IN_LIST FEATURES)
    set(backend_options -DWEFT_FIBER_BACKEND=boost)
endif()

# WEFT_TASK_TRACKING is given (ON or OFF: the feature task-tracking, a default feature),
# the same for the debug and release libraries, which share one set of headers
# (include/weft/build_config.h).
vcpkg_cmake_configure(
    SOURCE_PATH "${SOURCE_PATH}"
    OPTIONS
        -DWEFT_DEVELOPER=OFF
        -DWEFT_INSTALL=ON
        ${FEATURE_OPTIONS}
        ${backend_options}
)
vcpkg_cmake_install()
vcpkg_cmake_config_fixup(CONFIG_PATH lib/cmake/weft)
vcpkg_fixup_pkgconfig()

# weft's install puts its LICENSE in share/doc/weft/ (for debug too): vcpkg keeps it as
# share/weft/copyright instead (below), and a package has no debug/share.
file(REMOVE_RECURSE
    "${CURRENT_PACKAGES_DIR}/debug/include"
    "${CURRENT_PACKAGES_DIR}/debug/share"
    "${CURRENT_PACKAGES_DIR}/share/doc")
file(INSTALL "${CMAKE_CURRENT_LIST_DIR}/usage" DESTINATION "${CURRENT_PACKAGES_DIR}/share/${PORT}")
# Apache-2.0 (vcpkg.json "license"): the repository's LICENSE as share/weft/copyright.
vcpkg_install_copyright(FILE_LIST "${SOURCE_PATH}/LICENSE")
