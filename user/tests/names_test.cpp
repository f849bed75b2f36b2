// Names and text forms: events, record states, addresses.
#include <gtest/gtest.h>
#include <kdat/ep_table.h>

#include <cstring>
#include <kdat/names.hpp>
#include <kdat/types.hpp>

namespace {

TEST(Names, Events) {
  EXPECT_EQ(kdat::event_name(KDAT_DAT_CONNECTION_EVENT_ESTABLISHED),
            "CONNECTION_EVENT_ESTABLISHED");
  EXPECT_EQ(kdat::event_name(KDAT_DAT_CONNECTION_REQUEST_EVENT), "CONNECTION_REQUEST_EVENT");
  EXPECT_EQ(kdat::event_name(0), "NONE");
  EXPECT_EQ(kdat::event_name(0x4242), "EVENT_0x4242");
}

TEST(Names, RecordStates) {
  kdat_record r{};
  r.type = KDAT_REC_EP;
  r.state = KDAT_EP_DISCONNECT_PENDING;
  EXPECT_EQ(kdat::record_state_name(r), "DISCONNECT_PENDING");
  r.type = KDAT_REC_PSP;
  r.state = KDAT_SP_LISTENING;
  EXPECT_EQ(kdat::record_state_name(r), "LISTENING");
  r.type = KDAT_REC_CR;
  r.state = KDAT_CR_REMOTE_GONE;
  EXPECT_EQ(kdat::record_state_name(r), "REMOTE_GONE");
  r.type = KDAT_REC_EVD;
  r.state = KDAT_EVD_CONNECTION | KDAT_EVD_CR;
  EXPECT_EQ(kdat::record_state_name(r), "CONNECTION|CR");
  r.state = KDAT_EVD_DTO | 0x100;
  EXPECT_EQ(kdat::record_state_name(r), "DTO|0x100");
  EXPECT_STREQ(kdat::record_type_name(KDAT_REC_RSP), "RSP");
}

TEST(Names, FixedStringsNeedNoTerminator) {
  const char full[4] = {'a', 'b', 'c', 'd'};
  EXPECT_EQ(kdat::fixed_string(full), "abcd");
  const char shorter[4] = {'x', '\0', 'y', 'z'};
  EXPECT_EQ(kdat::fixed_string(shorter), "x");
}

TEST(Address, ParseAndFormat) {
  const auto v4 = kdat::Address::parse("192.0.2.1", 20000);
  EXPECT_EQ(v4.raw.family, KDAT_AF_INET);
  EXPECT_EQ(v4.to_string(), "192.0.2.1:20000");
  const auto v6 = kdat::Address::parse("[2001:db8::1]", 7);
  EXPECT_EQ(v6.raw.family, KDAT_AF_INET6);
  EXPECT_EQ(v6.to_string(), "[2001:db8::1]:7");
  EXPECT_EQ(kdat::Address{}.to_string(), "-");
  try {
    (void)kdat::Address::parse("kdat0");
    FAIL();
  } catch (const kdat::Error &e) {
    EXPECT_EQ(e.code().type(), KDAT_DAT_INVALID_ADDRESS);
  }
}

TEST(Event, UdTailOnlyWithItsFlag) {
  kdat_event raw{};
  raw.number = KDAT_DAT_CONNECTION_EVENT_TIMED_OUT;
  kdat_event_ud ud{};
  EXPECT_FALSE(kdat::Event::from_raw(raw).ud.has_value());
  EXPECT_FALSE(kdat::Event::from_raw(raw, ud).ud.has_value()) << "a zero tail is no peer";
  ud.qpn = 5;  // a tail without KDAT_UD_EVENT is not valid
  EXPECT_FALSE(kdat::Event::from_raw(raw, ud).ud.has_value());
  ud.flags = KDAT_UD_EVENT;
  const auto e = kdat::Event::from_raw(raw, ud);
  ASSERT_TRUE(e.ud.has_value());
  EXPECT_FALSE(e.ud->ah_valid);
  EXPECT_FALSE(e.ud->passive);
  EXPECT_EQ(e.ud->qpn, 5u);
  EXPECT_EQ(e.name(), "CONNECTION_EVENT_TIMED_OUT");
}

TEST(Event, UdPeerText) {
  kdat_event_ud ud{};
  ud.flags = KDAT_UD_EVENT | KDAT_UD_PASSIVE | KDAT_UD_AH_VALID;
  ud.qpn = 0x12;
  ud.qkey = 0x1234567;
  ud.addr = kdat::Address::parse("192.0.2.1", 20000).raw;
  const auto p = kdat::UdPeer::from_raw(ud);
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->to_string(), "qpn 0x12 qkey 0x1234567 192.0.2.1:20000 passive ah");
  ud.flags = KDAT_UD_EVENT;
  EXPECT_EQ(kdat::UdPeer::from_raw(ud)->to_string(), "qpn 0x12 qkey 0x1234567 192.0.2.1:20000");
}

TEST(Event, FromRawCopiesPrivateDataAndNames) {
  kdat_event raw{};
  raw.number = KDAT_DAT_CONNECTION_EVENT_ESTABLISHED;
  raw.private_data_size = 4;
  std::memcpy(raw.private_data, "pong", 4);
  const auto e = kdat::Event::from_raw(raw);
  EXPECT_TRUE(e.is_connection_event());
  EXPECT_FALSE(e.is_connection_request());
  EXPECT_EQ(e.private_data_string(), "pong");
  EXPECT_EQ(e.name(), "CONNECTION_EVENT_ESTABLISHED");
  raw.private_data_size = 100000;  // a lying size is clamped to the buffer
  EXPECT_EQ(kdat::Event::from_raw(raw).private_data.size(), sizeof(raw.private_data));
}

}  // namespace
