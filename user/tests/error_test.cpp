#include <gtest/gtest.h>

#include <cerrno>
#include <kdat/device.hpp>
#include <kdat/error.hpp>

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

TEST(Device, MissingNodeThrowsProviderNotFound) {
  try {
    const kdat::Device dev("/nonexistent/kdat");
    FAIL() << "opening a missing node must throw";
  } catch (const kdat::Error &e) {
    EXPECT_EQ(e.code().type(), KDAT_DAT_PROVIDER_NOT_FOUND);
  }
}

}  // namespace
