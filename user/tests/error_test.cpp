#include <gtest/gtest.h>

#include <cerrno>
#include <kdat/device.hpp>
#include <kdat/error.hpp>
#include <string>
#include <utility>

namespace {

TEST(DatReturn, SplitsTypeAndSubtype) {
  const kdat::DatReturn r{KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_STATE |
                          KDAT_DAT_INVALID_STATE_EP_CONNECTED};
  EXPECT_EQ(r.type(), KDAT_DAT_INVALID_STATE);
  EXPECT_EQ(r.subtype(), KDAT_DAT_INVALID_STATE_EP_CONNECTED);
  EXPECT_FALSE(r.ok());
  EXPECT_TRUE(kdat::DatReturn{}.ok());
}

TEST(DatReturn, ErrnoMapping) {
  EXPECT_EQ(kdat::dat_from_errno(ENOMEM).type(), KDAT_DAT_INSUFFICIENT_RESOURCES);
  EXPECT_EQ(kdat::dat_from_errno(EINVAL).type(), KDAT_DAT_INVALID_PARAMETER);
  EXPECT_EQ(kdat::dat_from_errno(EINTR).type(), KDAT_DAT_INTERRUPTED_CALL);
  EXPECT_EQ(kdat::dat_from_errno(ETIMEDOUT).type(), KDAT_DAT_TIMEOUT_EXPIRED);
}

TEST(Error, CarriesCodeAndName) {
  const kdat::Error e({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_HANDLE | KDAT_DAT_INVALID_HANDLE_EP},
                      "ep_free");
  EXPECT_EQ(e.code().type(), KDAT_DAT_INVALID_HANDLE);
  EXPECT_NE(std::string(e.what()).find("DAT_INVALID_HANDLE"), std::string::npos);
}

TEST(Error, NamesTypeAndSubtypeInWords) {
  const kdat::Error e({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_PARAMETER | KDAT_DAT_INVALID_ARG5},
                      "ep_connect");
  EXPECT_STREQ(e.what(), "ep_connect: DAT_INVALID_PARAMETER (DAT_INVALID_ARG5)");
  EXPECT_EQ(e.sys_errno(), 0);
  const kdat::Error state(
      {KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_STATE | KDAT_DAT_INVALID_STATE_EP_DISCONNECTED},
      "ep_disconnect");
  EXPECT_STREQ(state.what(),
               "ep_disconnect: DAT_INVALID_STATE (DAT_INVALID_STATE_EP_DISCONNECTED)");
  const kdat::Error bare({KDAT_DAT_CLASS_ERROR | KDAT_DAT_TIMEOUT_EXPIRED}, "evd_wait");
  EXPECT_STREQ(bare.what(), "evd_wait: DAT_TIMEOUT_EXPIRED");
  // A subtype without a name still says which, in the form the headers write it.
  const kdat::Error odd({KDAT_DAT_CLASS_ERROR | KDAT_DAT_INVALID_STATE | 0x99u}, "x");
  EXPECT_STREQ(odd.what(), "x: DAT_INVALID_STATE (subtype 0x99)");
}

// Every subtype the kernel can report (uapi/kdat_dat.h) has its DAT name.
TEST(Error, EverySubtypeOfTheMirrorHasItsName) {
  const std::pair<std::uint32_t, const char *> subtypes[] = {
#define S(name) {KDAT_DAT_##name, "DAT_" #name}
      S(SUB_INTERRUPTED),
      S(RESOURCE_MEMORY),
      S(RESOURCE_DEVICE),
      S(RESOURCE_TEP),
      S(RESOURCE_TEVD),
      S(RESOURCE_PROTECTION_DOMAIN),
      S(RESOURCE_MEMORY_REGION),
      S(RESOURCE_CREDITS),
      S(INVALID_HANDLE_IA),
      S(INVALID_HANDLE_EP),
      S(INVALID_HANDLE_LMR),
      S(INVALID_HANDLE_RMR),
      S(INVALID_HANDLE_PZ),
      S(INVALID_HANDLE_PSP),
      S(INVALID_HANDLE_RSP),
      S(INVALID_HANDLE_CR),
      S(INVALID_HANDLE_EVD_CR),
      S(INVALID_HANDLE_EVD_REQUEST),
      S(INVALID_HANDLE_EVD_RECV),
      S(INVALID_HANDLE_EVD_CONN),
      S(INVALID_HANDLE_EVD_ASYNC),
      S(INVALID_HANDLE1),
      S(INVALID_HANDLE2),
      S(INVALID_ARG1),
      S(INVALID_ARG2),
      S(INVALID_ARG3),
      S(INVALID_ARG4),
      S(INVALID_ARG5),
      S(INVALID_ARG6),
      S(INVALID_ARG7),
      S(INVALID_ARG8),
      S(INVALID_STATE_EP_UNCONNECTED),
      S(INVALID_STATE_EP_ACTCONNPENDING),
      S(INVALID_STATE_EP_PASSCONNPENDING),
      S(INVALID_STATE_EP_TENTCONNPENDING),
      S(INVALID_STATE_EP_CONNECTED),
      S(INVALID_STATE_EP_DISCONNECTED),
      S(INVALID_STATE_EP_RESERVED),
      S(INVALID_STATE_EP_COMPLPENDING),
      S(INVALID_STATE_EP_DISCPENDING),
      S(INVALID_STATE_EP_NOTREADY),
      S(INVALID_STATE_EVD_IN_USE),
      S(INVALID_STATE_EVD_WAITER),
      S(INVALID_STATE_IA_IN_USE),
#undef S
  };
  for (const auto &[value, name] : subtypes) {
    ASSERT_NE(kdat::dat_subtype_name(value), nullptr) << name;
    EXPECT_STREQ(kdat::dat_subtype_name(value), name);
  }
  EXPECT_EQ(kdat::dat_subtype_name(0), nullptr);
}

TEST(Device, MissingNodeThrowsProviderNotFound) {
  try {
    const kdat::Device dev("/nonexistent/kdat");
    FAIL() << "opening a missing node must throw";
  } catch (const kdat::Error &e) {
    EXPECT_EQ(e.code().type(), KDAT_DAT_PROVIDER_NOT_FOUND);
    EXPECT_EQ(e.sys_errno(), ENOENT);
    const std::string what = e.what();
    EXPECT_NE(what.find("DAT_PROVIDER_NOT_FOUND"), std::string::npos) << what;
    EXPECT_NE(what.find("modprobe kdat"), std::string::npos) << what;  // the advice
  }
}

// A node that is not kdat's answers its first ioctl with ENOTTY: the text says what to check.
TEST(Device, ForeignNodeSaysWhatToCheck) {
  const kdat::Device dev("/dev/null");
  try {
    (void)dev.version();
    FAIL() << "KDAT_IOC_VERSION on /dev/null must throw";
  } catch (const kdat::Error &e) {
    EXPECT_EQ(e.code().type(), KDAT_DAT_INVALID_PARAMETER);
    EXPECT_EQ(e.sys_errno(), ENOTTY);
    EXPECT_NE(std::string(e.what()).find("kdatctl version"), std::string::npos) << e.what();
  }
}

}  // namespace
