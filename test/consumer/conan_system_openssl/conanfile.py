"""A stand-in for Conan Center's openssl/3.x recipe, for test/consumer/run.sh's conan
mode only: it packages nothing and points at the system's OpenSSL (Debian libssl-dev),
with the interface of the real recipe (CMake package OpenSSL, targets OpenSSL::SSL and
OpenSSL::Crypto, components ssl and crypto, pkg-config openssl), so that
`conan create . -o weft/*:tls=True` can run offline (--no-remote). Not for users: their
openssl/3.x comes from Conan Center."""

import os
import re

from conan import ConanFile
from conan.errors import ConanInvalidConfiguration


class SystemOpenSslConan(ConanFile):
    name = "openssl"
    settings = "os", "arch", "compiler", "build_type"
    package_type = "shared-library"

    def set_version(self):
        header = "/usr/include/openssl/opensslv.h"
        if not os.path.exists(header):
            raise ConanInvalidConfiguration(f"no {header}: install the system's OpenSSL 3 "
                                            "(Debian libssl-dev)")
        with open(header) as f:
            match = re.search(r'# *define OPENSSL_VERSION_STR "([0-9.]+)"', f.read())
        if not match:
            raise ConanInvalidConfiguration(f"{header} has no OPENSSL_VERSION_STR (not OpenSSL 3)")
        self.version = match.group(1)

    def package_id(self):
        self.info.clear()  # the system's, whatever the settings

    def package_info(self):
        self.cpp_info.set_property("cmake_file_name", "OpenSSL")
        self.cpp_info.set_property("cmake_find_mode", "both")
        self.cpp_info.set_property("pkg_config_name", "openssl")
        self.cpp_info.includedirs = []
        self.cpp_info.libdirs = []
        self.cpp_info.bindirs = []
        crypto = self.cpp_info.components["crypto"]
        crypto.set_property("cmake_target_name", "OpenSSL::Crypto")
        crypto.set_property("pkg_config_name", "libcrypto")
        crypto.system_libs = ["crypto"]
        crypto.includedirs = []
        crypto.libdirs = []
        crypto.bindirs = []
        ssl = self.cpp_info.components["ssl"]
        ssl.set_property("cmake_target_name", "OpenSSL::SSL")
        ssl.set_property("pkg_config_name", "libssl")
        ssl.system_libs = ["ssl"]
        ssl.requires = ["crypto"]
        ssl.includedirs = []
        ssl.libdirs = []
        ssl.bindirs = []
