// What `engine profile` writes into its header about the machine (engine/profile.h): the NVIDIA
// driver version read from /proc/driver/nvidia/version, for both kernel-module flavours.
#include <gtest/gtest.h>

#include <string>

#include "engine/profile.h"

namespace servelab {
namespace {

TEST(ProfileHeader, NvidiaDriverVersionOfBothKernelModules) {
  // The proprietary module's line.
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.65.06  Sun Jul 27 07:09:40 "
                "UTC 2025\nGCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"),
            "580.65.06");
  // The open kernel module's (an H200 host, 2026-11-28): "for x86_64" comes first.
  EXPECT_EQ(parse_nvidia_driver_version(
                "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.159.04  Release "
                "Build  (dvs-builder@U22-I3-AE18-23-3)  Mon Oct 20 01:06:22 UTC 2025\n"),
            "580.159.04");
  EXPECT_EQ(parse_nvidia_driver_version(""), "unknown");
  EXPECT_EQ(parse_nvidia_driver_version("NVRM version: NVIDIA UNIX Kernel Module for x86_64\n"),
            "unknown");
  EXPECT_EQ(parse_nvidia_driver_version("GCC version: gcc 12.2.0\n"), "unknown");
}

}  // namespace
}  // namespace servelab
