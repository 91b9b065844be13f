"""Conan 2 recipe for weft: builds weft's static libraries with its own CMake build.

    conan create . -s compiler.cppstd=20 --build=missing

Requires nothing from a Conan remote, unless TLS is asked for (below). weft's two
optional system dependencies come from the system's package manager, as the recipe checks
(system_requirements):
  - liburing, for the io_uring event loop (option io_uring, on by default; Debian/Ubuntu
    liburing-dev, Fedora liburing-devel). Without it: -o weft/*:io_uring=False (epoll).
  - Boost.Context, for fiber_backend=boost only (Debian/Ubuntu libboost-context-dev,
    Fedora boost-devel). The asm backend, the default on x86-64 and aarch64 Linux, needs
    nothing.
Conan checks for them and stops with the packages' names when they are missing; with
-c tools.system.package_manager:mode=install it installs them.

TLS (weft::tls: TlsContext, TlsStream) is the option tls, off by default: with
-o weft/*:tls=True the package requires OpenSSL 3 from Conan (openssl/[>=3 <4], Conan
Center's recipe, as any package that links OpenSSL should, so that a program has one
OpenSSL) and builds the component tls against it.

Components, named as weft's CMake targets (find_package(weft), CMakeDeps): weft::coro,
weft::executors, weft::io, weft::stackful, weft::testing (virtual time and the seeded
Simulation, for tests), and weft::weft for all of them; weft::tls with tls=True
(pkg-config: weft, and weft-tls for the tls component, with PkgConfigDeps). Conan's
weft::weft (and weft.pc) is the package's every component, so with tls=True it includes
weft::tls, where weft's own CMake package keeps TLS apart: link weft::tls for TLS either
way.
"""

import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration
from conan.tools.build import check_min_cppstd
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout
from conan.tools.files import copy, load, rmdir
from conan.tools.system.package_manager import Apt, Dnf

required_conan_version = ">=2.0"


class WeftConan(ConanFile):
    name = "weft"
    license = "Apache-2.0"
    description = ("C++20 coroutines and fibers for async services: Lazy/Task, fibers, "
                   "executors, I/O")
    topics = ("coroutines", "fibers", "async", "io_uring", "executors")
    package_type = "static-library"
    settings = "os", "arch", "compiler", "build_type"
    options = {
        # The fibers' switch core: weft's own assembly (x86-64, aarch64 Linux) or
        # Boost.Context's fcontext (CMake WEFT_FIBER_BACKEND).
        "fiber_backend": ["asm", "boost"],
        # The io_uring event loop (liburing); epoll is always built (CMake WEFT_IO_URING).
        "io_uring": [True, False],
        # Task dumps list root tasks (CMake WEFT_TASK_TRACKING); on by default in every
        # build type. None, the default of earlier versions (Debug only), is on too.
        "task_tracking": [None, True, False],
        # weft::tls on OpenSSL 3 (CMake WEFT_TLS=ON; OFF otherwise, whatever the system has).
        "tls": [True, False],
        "fPIC": [True, False],
    }
    default_options = {
        "fiber_backend": "asm",
        "io_uring": True,
        "task_tracking": True,
        "tls": False,
        "fPIC": True,
    }
    # version.h is the one place of the version (set_version reads it, also in the cache).
    exports = "version.h"
    # What the library's build needs, and nothing else (no tests, benchmarks or docs).
    exports_sources = (
        "CMakeLists.txt",
        "LICENSE",
        "version.h",
        "cmake/*.cmake",
        "cmake/*.in",
        "coro/*",
        "executors/*",
        "io/*",
        "stackful/*",
        "testing/*",
    )

    def set_version(self):
        text = load(self, os.path.join(self.recipe_folder, "version.h"))
        parts = []
        for part in ("MAJOR", "MINOR", "PATCH"):
            match = re.search(rf"^#define WEFT_VERSION_{part} (\d+)$", text, re.MULTILINE)
            if not match:
                raise ConanInvalidConfiguration(f"weft: version.h defines no WEFT_VERSION_{part}")
            parts.append(match.group(1))
        self.version = ".".join(parts)

    def config_options(self):
        # weft's assembly exists for x86-64 and aarch64 Linux; elsewhere Boost.Context.
        if not self._has_asm_backend:
            self.options.fiber_backend = "boost"

    @property
    def _has_asm_backend(self):
        return self.settings.os == "Linux" and str(self.settings.arch) in ("x86_64", "armv8")

    @property
    def _task_tracking(self):
        if self.options.task_tracking == None:  # noqa: E711 (a Conan option value)
            return True
        return bool(self.options.task_tracking)

    def validate(self):
        check_min_cppstd(self, 20)
        if self.settings.os != "Linux":
            raise ConanInvalidConfiguration("weft: Linux only (epoll, io_uring)")
        if self.options.fiber_backend == "asm" and not self._has_asm_backend:
            raise ConanInvalidConfiguration(
                f"weft: no fiber assembly for {self.settings.arch}: -o weft/*:fiber_backend=boost")

    def requirements(self):
        if self.options.tls:
            # weft::tls's headers include no OpenSSL header (they declare ssl_st), so a
            # consumer needs OpenSSL only to link: not transitive_headers.
            self.requires("openssl/[>=3 <4]")

    def system_requirements(self):
        # From the system, not from a Conan remote (Conan's mode "check" by default: a
        # missing package is an error naming it).
        apt, dnf = [], []
        if self.options.io_uring:
            apt.append("liburing-dev")
            dnf.append("liburing-devel")
        if self.options.fiber_backend == "boost":
            apt.append("libboost-context-dev")
            dnf.append("boost-devel")
        if apt:
            Apt(self).install(apt)
            Dnf(self).install(dnf)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        # find_package(OpenSSL 3 REQUIRED) in weft's build, with tls=True (and nothing
        # otherwise).
        CMakeDeps(self).generate()
        tc = CMakeToolchain(self)
        tc.cache_variables["WEFT_DEVELOPER"] = False
        tc.cache_variables["WEFT_INSTALL"] = True
        tc.cache_variables["WEFT_FIBER_BACKEND"] = str(self.options.fiber_backend)
        tc.cache_variables["WEFT_IO_URING"] = "ON" if self.options.io_uring else "OFF"
        tc.cache_variables["WEFT_TASK_TRACKING"] = "ON" if self._task_tracking else "OFF"
        tc.cache_variables["WEFT_TLS"] = "ON" if self.options.tls else "OFF"
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def package(self):
        CMake(self).install()
        # Consumers get Conan's own CMake and pkg-config files (package_info below).
        rmdir(self, os.path.join(self.package_folder, "lib", "cmake"))
        rmdir(self, os.path.join(self.package_folder, "lib", "pkgconfig"))
        # The license goes where Conan packages keep it (licenses/), not share/doc/weft/.
        rmdir(self, os.path.join(self.package_folder, "share"))
        copy(self, "LICENSE", src=self.source_folder,
             dst=os.path.join(self.package_folder, "licenses"))

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "weft")
        self.cpp_info.set_property("cmake_target_name", "weft::weft")
        self.cpp_info.set_property("pkg_config_name", "weft")

        executors = self.cpp_info.components["executors"]
        executors.set_property("cmake_target_name", "weft::executors")
        executors.libs = ["weft_executors"]
        executors.system_libs = ["pthread"]
        if self.options.io_uring:
            executors.system_libs.append("uring")

        coro = self.cpp_info.components["coro"]
        coro.set_property("cmake_target_name", "weft::coro")
        coro.libs = ["weft_coro"]
        coro.requires = ["executors"]
        coro.defines = [f"WEFT_TASK_TRACKING={1 if self._task_tracking else 0}"]
        coro.system_libs = ["dl"]

        io = self.cpp_info.components["io"]
        io.set_property("cmake_target_name", "weft::io")
        io.libs = ["weft_io"]
        io.requires = ["coro", "executors"]

        stackful = self.cpp_info.components["stackful"]
        stackful.set_property("cmake_target_name", "weft::stackful")
        stackful.libs = ["weft_stackful"]
        stackful.requires = ["coro", "executors"]
        if self.options.fiber_backend == "boost":
            stackful.defines = ["WEFT_FIBER_BACKEND_BOOST=1"]
            stackful.system_libs = ["boost_context"]
        else:
            stackful.defines = ["WEFT_FIBER_BACKEND_ASM=1"]

        if self.options.tls:
            tls = self.cpp_info.components["tls"]
            tls.set_property("cmake_target_name", "weft::tls")
            tls.set_property("pkg_config_name", "weft-tls")
            tls.libs = ["weft_tls"]
            tls.requires = ["io", "openssl::ssl", "openssl::crypto"]

        testing = self.cpp_info.components["testing"]
        testing.set_property("cmake_target_name", "weft::testing")
        testing.libs = ["weft_testing"]
        testing.requires = ["io", "stackful", "coro", "executors"]
