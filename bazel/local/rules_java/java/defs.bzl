"""Offline stand-in for @rules_java//java:defs.bzl: the native Java rules, re-exported.

weft has no Java; @bazel_tools//tools/jdk loads this file when Bazel registers its
default toolchains, so it has to exist.
"""

def java_binary(**attrs):
    native.java_binary(**attrs)

def java_import(**attrs):
    native.java_import(**attrs)

def java_library(**attrs):
    native.java_library(**attrs)

def java_plugin(**attrs):
    native.java_plugin(**attrs)

def java_runtime(**attrs):
    native.java_runtime(**attrs)

def java_test(**attrs):
    native.java_test(**attrs)

def java_toolchain(**attrs):
    native.java_toolchain(**attrs)
