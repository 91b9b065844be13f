"""conan create's test of the weft package: builds test/consumer/main.cc (a Lazy, the
thread pool, a TCP byte over loopback, a fiber; <weft/version.h> against the package's
version) with find_package(weft) from CMakeDeps, under strict warnings, and runs it; with
weft's option tls, test/consumer/tls_main.cc against weft::tls too."""

import os

from conan import ConanFile
from conan.tools.build import can_run
from conan.tools.cmake import CMake, CMakeDeps, CMakeToolchain, cmake_layout


class WeftTestConan(ConanFile):
    settings = "os", "arch", "compiler", "build_type"
    generators = "CMakeDeps"
    test_type = "explicit"

    def requirements(self):
        self.requires(self.tested_reference_str)

    def layout(self):
        cmake_layout(self)

    def generate(self):
        tc = CMakeToolchain(self)
        tc.cache_variables["WEFT_EXPECTED_VERSION"] = str(self.dependencies["weft"].ref.version)
        tc.generate()

    def build(self):
        cmake = CMake(self)
        cmake.configure()
        cmake.build()

    def test(self):
        if can_run(self):
            self.run(os.path.join(self.cpp.build.bindir, "test_package"), env="conanrun")
            if self.dependencies["weft"].options.tls:
                self.run(os.path.join(self.cpp.build.bindir, "test_package_tls"), env="conanrun")
