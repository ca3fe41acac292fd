// Tests of engine/handshake: round trips of every message type, the exact
// little-endian layout, and one test per decoder rejection (C8: malformed,
// oversized, wrong-version or hostile input -> a clear error, no message).
#include "engine/handshake.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace ferry::engine {
namespace {

using ::testing::HasSubstr;

HandshakeMessage Req() {
  HandshakeMessage m;
  m.type = HandshakeType::kReq;
  m.incarnation = 0x1122334455667788ull;
  m.generation = 3;
  m.src_nic_path = "10.0.0.1:7000@mlx5_0";
  m.dst_nic = "mlx5_1";
  m.qps = {{0x000101, 0x00abcd}, {0x000102, 0xffffff}};
  for (int i = 0; i < 16; ++i) m.gid.raw[i] = static_cast<uint8_t>(0xf0 + i);
  m.lid = 0x1234;
  m.mtu = hal::Mtu::k4096;
  m.rd_atomic = 16;
  return m;
}

HandshakeMessage Rep() {
  HandshakeMessage m = Req();
  m.type = HandshakeType::kRep;
  m.echo_incarnation = 99;
  m.echo_generation = 7;
  return m;
}

HandshakeMessage Reply(HandshakeType type) {
  HandshakeMessage m;
  m.type = type;
  m.incarnation = 5;
  m.generation = 1;
  m.echo_incarnation = 6;
  m.echo_generation = 2;
  m.src_nic_path = "b:1@n";
  m.dst_nic = "n";
  if (type == HandshakeType::kError) {
    m.error_code = absl::StatusCode::kResourceExhausted;
    m.error_message = "endpoint store full";
  }
  if (type == HandshakeType::kWinReq || type == HandshakeType::kWin) m.window = 0x0102030405060708;
  if (type == HandshakeType::kWin) m.window_rkeys = {0x80001af, 0x80002b0};
  return m;
}

std::vector<uint8_t> Enc(const HandshakeMessage& m) {
  auto e = EncodeHandshake(m);
  EXPECT_TRUE(e.ok()) << e.status();
  return e.ok() ? *e : std::vector<uint8_t>{};
}

// Expects `bytes` to be rejected with `code` and a message containing `what`.
void ExpectRejected(const std::vector<uint8_t>& bytes, absl::StatusCode code,
                    const std::string& what) {
  auto d = DecodeHandshake(bytes);
  ASSERT_FALSE(d.ok()) << "accepted: " << what;
  EXPECT_EQ(d.status().code(), code) << d.status();
  EXPECT_THAT(std::string(d.status().message()), HasSubstr(what));
}

// Offsets of the fixed header fields.
constexpr size_t kOffVersion = 4;
constexpr size_t kOffType = 6;
constexpr size_t kOffFlags = 7;
constexpr size_t kOffIncarnation = 8;
constexpr size_t kOffSrcLen = kHandshakeHeaderBytes;

TEST(Handshake, EveryTypeRoundTrips) {
  HandshakeMessage refused = Reply(HandshakeType::kWin);
  refused.window_status = WindowStatus::kRefused;
  refused.window_rkeys.clear();
  for (const HandshakeMessage& m :
       {Req(), Rep(), Reply(HandshakeType::kRtu), Reply(HandshakeType::kStale),
        Reply(HandshakeType::kError), Reply(HandshakeType::kWinReq), Reply(HandshakeType::kWin),
        refused}) {
    const std::vector<uint8_t> bytes = Enc(m);
    auto back = DecodeHandshake(bytes);
    ASSERT_TRUE(back.ok()) << HandshakeTypeName(m.type) << ": " << back.status();
    EXPECT_EQ(*back, m) << HandshakeTypeName(m.type);
    EXPECT_LE(bytes.size(), kHandshakeBytesMax);
  }
}

TEST(Handshake, LayoutIsLittleEndianAndFixed) {
  const std::vector<uint8_t> b = Enc(Req());
  // magic "FHSK", version 2, type REQ, flags 0
  EXPECT_EQ((std::vector<uint8_t>(b.begin(), b.begin() + 8)),
            (std::vector<uint8_t>{'F', 'H', 'S', 'K', 2, 0, 1, 0}));
  EXPECT_EQ(b[kOffIncarnation], 0x88);
  EXPECT_EQ(b[kOffIncarnation + 7], 0x11);
  EXPECT_EQ(b[kOffSrcLen], Req().src_nic_path.size());
  EXPECT_EQ(b[kOffSrcLen + 1], 0);
  // 40 header + 2+20 src + 2+6 dst + 1 count + 2*8 QPs + 16 gid + 2 lid + 1 mtu
  // + 1 rd_atomic
  EXPECT_EQ(b.size(), 40u + 22 + 8 + 1 + 16 + 16 + 2 + 1 + 1);
  EXPECT_EQ(b[b.size() - 1], 16);    // rd_atomic
  EXPECT_EQ(b[b.size() - 2], 5);     // MTU 4096
  EXPECT_EQ(b[b.size() - 4], 0x34);  // LID low byte first
}

TEST(Handshake, MaximalMessageFitsTheBound) {
  HandshakeMessage m = Rep();
  m.src_nic_path = std::string(kNicPathBytesMax, 'a');
  m.dst_nic = std::string(kNicNameBytesMax, 'b');
  m.qps.clear();
  for (uint32_t i = 1; i <= kHandshakeQpsMax; ++i) m.qps.push_back({i, i});
  const std::vector<uint8_t> b = Enc(m);
  EXPECT_LE(b.size(), kHandshakeBytesMax);
  EXPECT_TRUE(DecodeHandshake(b).ok());
}

TEST(HandshakeDecode, RejectsEmptyAndEveryTruncation) {
  ExpectRejected({}, absl::StatusCode::kInvalidArgument, "truncated");
  const std::vector<uint8_t> full = Enc(Rep());
  for (size_t n = 0; n < full.size(); ++n) {
    auto d = DecodeHandshake(absl::MakeConstSpan(full.data(), n));
    ASSERT_FALSE(d.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(HandshakeDecode, RejectsTrailingBytes) {
  std::vector<uint8_t> b = Enc(Req());
  b.push_back(0);
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "trailing");
}

TEST(HandshakeDecode, RejectsOversizedInput) {
  std::vector<uint8_t> b = Enc(Req());
  b.resize(kHandshakeBytesMax + 1, 0);
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "oversized");
}

TEST(HandshakeDecode, RejectsBadMagic) {
  std::vector<uint8_t> b = Enc(Req());
  b[0] ^= 0xff;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "magic");
}

TEST(HandshakeDecode, RejectsOtherVersions) {
  std::vector<uint8_t> b = Enc(Req());
  b[kOffVersion] = 1;  // before rd_atomic (one READ in flight per QP)
  ExpectRejected(b, absl::StatusCode::kUnimplemented, "version 1 not supported");
  b[kOffVersion] = 3;
  ExpectRejected(b, absl::StatusCode::kUnimplemented, "version 3");
  b[kOffVersion] = 0;
  ExpectRejected(b, absl::StatusCode::kUnimplemented, "version 0");
}

TEST(HandshakeDecode, RejectsRdAtomicZeroAndOnMessagesWithoutBody) {
  std::vector<uint8_t> b = Enc(Req());
  b.back() = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "rd_atomic 0");
  HandshakeMessage m = Req();
  m.rd_atomic = 0;
  EXPECT_FALSE(EncodeHandshake(m).ok());
  m = Reply(HandshakeType::kRtu);
  m.rd_atomic = 4;
  auto e = EncodeHandshake(m);
  ASSERT_FALSE(e.ok());
  EXPECT_THAT(std::string(e.status().message()), HasSubstr("must not carry GID/LID/MTU/rd_atomic"));
}

TEST(HandshakeDecode, RejectsUnknownTypeAndFlags) {
  std::vector<uint8_t> b = Enc(Req());
  b[kOffType] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "unknown type 0");
  b[kOffType] = 8;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "unknown type 8");
  b = Enc(Req());
  b[kOffFlags] = 1;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "flags");
}

TEST(HandshakeDecode, RejectsZeroIdentity) {
  HandshakeMessage m = Req();
  std::vector<uint8_t> b = Enc(m);
  for (int i = 0; i < 8; ++i) b[kOffIncarnation + i] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "incarnation is 0");
  b = Enc(m);
  for (int i = 0; i < 8; ++i) b[kOffIncarnation + 8 + i] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "generation 0");
}

TEST(HandshakeDecode, RejectsEchoRules) {
  std::vector<uint8_t> b = Enc(Req());
  b[kOffIncarnation + 16] = 1;  // a REQ names its target's incarnation: valid
  ASSERT_TRUE(DecodeHandshake(b).ok());
  EXPECT_EQ(DecodeHandshake(b)->echo_incarnation, 1u);
  b[kOffIncarnation + 24] = 1;  // REQ with an echoed generation
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "non-zero echo_generation");
  b = Enc(Rep());
  for (int i = 0; i < 8; ++i) b[kOffIncarnation + 24 + i] = 0;  // REP without echo gen
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "without the echo");
}

TEST(HandshakeDecode, RejectsHostileStringLengths) {
  std::vector<uint8_t> b = Enc(Req());
  b[kOffSrcLen] = 0xff;
  b[kOffSrcLen + 1] = 0xff;  // 65535 > kNicPathBytesMax: refused before any copy
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "src_nic_path length 65535");
  b = Enc(Req());
  b[kOffSrcLen] = 0;  // empty name
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "");
}

TEST(HandshakeDecode, RejectsBadNameBytes) {
  HandshakeMessage m = Req();
  std::vector<uint8_t> b = Enc(m);
  b[kOffSrcLen + 2] = ' ';
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "src_nic_path byte 0 (0x20)");
  b[kOffSrcLen + 2] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "(0x00)");
}

// Offset of the qp_count byte in Req()/Rep() encodings.
size_t QpCountOffset(const HandshakeMessage& m) {
  return kHandshakeHeaderBytes + 2 + m.src_nic_path.size() + 2 + m.dst_nic.size();
}

TEST(HandshakeDecode, RejectsQpCountOutOfBounds) {
  const HandshakeMessage m = Req();
  std::vector<uint8_t> b = Enc(m);
  b[QpCountOffset(m)] = kHandshakeQpsMax + 1;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "qp_count 65 exceeds 64");
  b[QpCountOffset(m)] = 0xff;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "qp_count 255");
  b[QpCountOffset(m)] = 40;  // in bounds, but the bytes are not there
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "truncated QP list");
}

TEST(HandshakeDecode, RejectsBadQpFields) {
  const HandshakeMessage m = Req();
  const size_t qp0 = QpCountOffset(m) + 1;
  std::vector<uint8_t> b = Enc(m);
  for (int i = 0; i < 4; ++i) b[qp0 + i] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "QPN 0");
  b = Enc(m);
  b[qp0 + 3] = 1;  // QPN >= 2^24
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "outside 1..0xffffff");
  b = Enc(m);
  b[qp0 + 7] = 1;  // PSN >= 2^24
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "start PSN");
  b = Enc(m);
  b[qp0 + 8] = b[qp0];  // second QPN == first
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "listed twice");
  b = Enc(m);
  b[QpCountOffset(m)] = 0;  // REQ without QPs (and now trailing junk shape)
  b.erase(b.begin() + static_cast<ptrdiff_t>(qp0), b.begin() + static_cast<ptrdiff_t>(qp0 + 16));
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "lists 0 QPs");
}

TEST(HandshakeDecode, RejectsBadMtu) {
  std::vector<uint8_t> b = Enc(Req());
  const size_t mtu_at = b.size() - 2;  // rd_atomic follows it
  b[mtu_at] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "MTU code 0");
  b[mtu_at] = 6;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "MTU code 6");
}

TEST(HandshakeDecode, RejectsBodyOnReplyTypes) {
  // An RTU claiming QPs: qp_count 1 plus one entry spliced in.
  const HandshakeMessage m = Reply(HandshakeType::kRtu);
  std::vector<uint8_t> b = Enc(m);
  const size_t off = QpCountOffset(m);
  b[off] = 1;
  const std::vector<uint8_t> qp = {1, 0, 0, 0, 0, 0, 0, 0};
  b.insert(b.begin() + static_cast<ptrdiff_t>(off + 1), qp.begin(), qp.end());
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "RTU must not list QPs");
}

TEST(HandshakeDecode, RejectsBadErrorFields) {
  const HandshakeMessage m = Reply(HandshakeType::kError);
  std::vector<uint8_t> b = Enc(m);
  const size_t code_off = QpCountOffset(m) + 1;
  b[code_off] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "ERROR code 0");
  b[code_off] = 17;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "ERROR code 17");
  b = Enc(m);
  b[code_off + 4] = '\n';  // first message byte
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "error_message byte 0");
  b = Enc(m);
  b[code_off + 2] = 0x01;
  b[code_off + 3] = 0x02;  // 513 > kErrorMessageBytesMax
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "error_message length 513");
}

// WINREQ and WIN (docs/security.md section 6): the window fields only on
// them, each checked, every truncation of a WIN refused.
TEST(HandshakeDecode, RejectsBadWindowFields) {
  const std::vector<uint8_t> win = Enc(Reply(HandshakeType::kWin));
  // 40 header + 2+5 src + 2+1 dst + 1 count + 8 window + 1 status + 1 n + 2*4
  ASSERT_EQ(win.size(), 40u + 7 + 3 + 1 + 8 + 1 + 1 + 8);
  const size_t off_window = 40 + 7 + 3 + 1;
  for (size_t n = 0; n < win.size(); ++n)
    EXPECT_FALSE(DecodeHandshake(absl::MakeConstSpan(win.data(), n)).ok()) << n;
  std::vector<uint8_t> b = win;
  for (size_t i = 0; i < 8; ++i) b[off_window + i] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "window 0");
  b = win;
  b[off_window + 8] = 3;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "WIN status 3 not 0..2");
  b = win;
  b[off_window + 9] = 65;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "rkey count 65 exceeds 64");
  b = win;
  b[off_window + 9] = 3;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "truncated WIN rkeys");
  b = win;
  for (size_t i = 0; i < 4; ++i) b[off_window + 10 + i] = 0;
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "WIN rkey 0");
  b = win;
  b[off_window + 8] = 1;  // refused, but lists rkeys
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "refused WIN must not list rkeys");
  b = win;
  b[off_window + 9] = 0;  // bound with no rkey
  b.resize(off_window + 10);
  ExpectRejected(b, absl::StatusCode::kInvalidArgument, "WIN lists 0 rkeys");
  // The fields on another type are refused by the encoder.
  HandshakeMessage rtu = Reply(HandshakeType::kRtu);
  rtu.window = 9;
  EXPECT_THAT(std::string(EncodeHandshake(rtu).status().message()),
              HasSubstr("RTU must not carry window fields"));
  HandshakeMessage wreq = Reply(HandshakeType::kWinReq);
  wreq.window_rkeys = {1};
  EXPECT_THAT(std::string(EncodeHandshake(wreq).status().message()),
              HasSubstr("WINREQ must not carry a status or rkeys"));
  // A WINREQ answers an endpoint: echo needed.
  wreq = Reply(HandshakeType::kWinReq);
  wreq.echo_generation = 0;
  EXPECT_THAT(std::string(EncodeHandshake(wreq).status().message()),
              HasSubstr("WINREQ without the echo"));
}

TEST(HandshakeEncode, RefusesInvalidMessages) {
  HandshakeMessage m = Req();
  m.qps.clear();
  EXPECT_EQ(EncodeHandshake(m).status().code(), absl::StatusCode::kInvalidArgument);
  m = Req();
  m.qps.resize(kHandshakeQpsMax + 1, HandshakeQp{1, 1});
  EXPECT_EQ(EncodeHandshake(m).status().code(), absl::StatusCode::kInvalidArgument);
  m = Reply(HandshakeType::kStale);
  m.lid = 1;
  EXPECT_THAT(std::string(EncodeHandshake(m).status().message()), HasSubstr("GID/LID/MTU"));
  m = Reply(HandshakeType::kRtu);
  m.error_message = "x";
  EXPECT_THAT(std::string(EncodeHandshake(m).status().message()), HasSubstr("error"));
  m = Req();
  m.dst_nic = std::string(kNicNameBytesMax + 1, 'x');
  EXPECT_THAT(std::string(EncodeHandshake(m).status().message()), HasSubstr("dst_nic"));
  EXPECT_EQ(QpnsOf(Req()), (std::vector<uint32_t>{0x101, 0x102}));
}

}  // namespace
}  // namespace ferry::engine
