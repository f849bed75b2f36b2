// Host tests of libvipl-kdat's private-data format and discriminator -> qualifier mapping.
#include "wire.hpp"

#include <gtest/gtest.h>
#include <vipl.h>

#include <cstring>
#include <set>
#include <string>

namespace {

vipl::Bytes text(const char *s) { return vipl::Bytes(s, s + std::strlen(s)); }

TEST(ViplWire, RequestRoundTripsWithBothDiscriminators) {
  vipl::Request r{
      vipl::Kind::peer, {2, true, false, 65536, 7}, text("client-side"), vipl::Bytes(16, 0xab)};
  const auto bytes = vipl::encode_request(r);
  EXPECT_EQ(bytes.size(), vipl::header_size + 11 + 16);
  EXPECT_LE(bytes.size(), 52u);  // fits RoCE's connect private data (kdat: 52 bytes)
  const auto back = vipl::decode_request(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(*back, r);
}

TEST(ViplWire, MalformedRequestsAreNotVipl) {
  auto bytes =
      vipl::encode_request({vipl::Kind::client, {1, false, false, 1, 0}, text("a"), text("b")});
  EXPECT_TRUE(vipl::decode_request(bytes));
  auto longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(vipl::decode_request(longer));  // length must match the discriminators
  auto bad_magic = bytes;
  bad_magic[0] = 'X';
  EXPECT_FALSE(vipl::decode_request(bad_magic));
  auto accept_kind = bytes;
  accept_kind[3] = static_cast<std::uint8_t>(vipl::Kind::accept);
  EXPECT_FALSE(vipl::decode_request(accept_kind));
  auto too_long_disc = bytes;
  too_long_disc[6] = 17;
  EXPECT_FALSE(vipl::decode_request(too_long_disc));
  EXPECT_FALSE(vipl::decode_request(vipl::Bytes{}));
}

TEST(ViplWire, AcceptAndRejectRoundTrip) {
  const vipl::Attributes a{4, false, true, 0x80000000u, 0xdeadbeef};
  EXPECT_EQ(vipl::decode_accept(vipl::encode_accept(a)), a);
  EXPECT_EQ(vipl::decode_reject(vipl::encode_reject(vipl::RejectReason::no_match)),
            vipl::RejectReason::no_match);
  EXPECT_EQ(vipl::decode_reject(vipl::encode_reject(vipl::RejectReason::rejected)),
            vipl::RejectReason::rejected);
  EXPECT_EQ(vipl::decode_reject(vipl::encode_reject(vipl::RejectReason::mismatch)),
            vipl::RejectReason::mismatch);
  EXPECT_FALSE(vipl::decode_reject(vipl::Bytes{'V', 'I', 1, 4, 9}));
  EXPECT_FALSE(vipl::decode_reject(vipl::Bytes{'V', 'I', 1, 4, 0}));
  EXPECT_FALSE(vipl::decode_accept(vipl::encode_reject(vipl::RejectReason::rejected)));
}

TEST(ViplWire, QualifiersStayBelowTheEphemeralRangeAndSpread) {
  std::set<std::uint16_t> seen;
  for (unsigned i = 0; i < 1000; ++i) {
    const auto d = text(("disc-" + std::to_string(i)).c_str());
    const auto q = vipl::conn_qual(d);
    EXPECT_GE(q, 16384);
    EXPECT_LT(q, 32768);
    EXPECT_EQ(vipl_kdat_conn_qual(d.data(), static_cast<VIP_UINT16>(d.size())), q);
    seen.insert(q);
  }
  EXPECT_GT(seen.size(), 950u);  // 1000 names in 16384 slots: few collisions
  EXPECT_EQ(vipl_kdat_conn_qual(nullptr, 17), 0);
  EXPECT_EQ(vipl_kdat_conn_qual(nullptr, 1), 0);
}

TEST(ViplWire, ReturnNames) {
  EXPECT_STREQ(vipl_kdat_return_name(VIP_NO_MATCH), "VIP_NO_MATCH");
  EXPECT_STREQ(vipl_kdat_return_name(static_cast<VIP_RETURN>(999)), "VIP_?");
}

}  // namespace
