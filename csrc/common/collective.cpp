#include "collective.hpp"

#include <cstdio>

namespace unishmem {

CallWords Call::pack() const {
  return {std::uint64_t(op) | std::uint64_t(dtype) << 8 | std::uint64_t(redop) << 16 | std::uint64_t(team) << 24 |
              std::uint64_t(root) << 32,
          bytes, team_id, std::uint64_t(a), std::uint64_t(b), std::uint64_t(c), seq};
}

Call Call::unpack(const std::uint64_t* w) {
  Call c;
  c.op = CallOp(w[0] & 0xff);
  c.dtype = DType(w[0] >> 8 & 0xff);
  c.redop = ReduceOp(w[0] >> 16 & 0xff);
  c.team = int(w[0] >> 24 & 0xff);
  c.root = std::uint32_t(w[0] >> 32);
  c.bytes = w[1];
  c.team_id = w[2];
  c.a = std::int64_t(w[3]);
  c.b = std::int64_t(w[4]);
  c.c = std::int64_t(w[5]);
  c.seq = w[6];
  return c;
}

std::uint64_t team_identity(const std::vector<int>& members) {
  std::uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a over the member numbers
  for (int m : members) {
    for (int i = 0; i < 4; ++i) {
      h ^= std::uint64_t(std::uint32_t(m) >> (8 * i) & 0xff);
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

namespace {

std::string of_dtype(const Call& c) { return std::string(" of ") + dtype_name(c.dtype); }

// `detail`: the PEs differ in what is otherwise not shown (call count, team identity).
std::string describe(const Call& c, bool detail) {
  static const char* redops[] = {"sum", "min", "max", "prod"};
  const std::string bytes = std::to_string(c.bytes) + " bytes";
  std::string s;
  switch (c.op) {
    case CallOp::none: return "made no collective call there";
    case CallOp::rejected: s = "rejected its arguments (see its own error)"; break;
    case CallOp::barrier: s = "called barrier"; break;
    case CallOp::sync: s = "called sync"; break;
    case CallOp::finalize: s = "called finalize"; break;
    case CallOp::broadcast:
      s = "called broadcast of " + bytes + of_dtype(c) + " from root " + std::to_string(c.root);
      break;
    case CallOp::fcollect: s = "called fcollect of " + bytes + of_dtype(c); break;
    case CallOp::alltoall: s = "called alltoall of " + bytes + of_dtype(c); break;
    case CallOp::reduce:
    case CallOp::reducescatter:
      s = std::string("called ") + (c.op == CallOp::reduce ? "reduce" : "reducescatter") + " of " + bytes +
          of_dtype(c) + " with op " + (int(c.redop) < 4 ? redops[int(c.redop)] : "?");
      break;
    case CallOp::alloc: s = "called allocation of " + bytes + of_dtype(c); break;
    case CallOp::free: s = "called free of heap offset " + std::to_string(c.bytes); break;
    case CallOp::split_strided:
      s = "called split_strided(start=" + std::to_string(c.a) + ", stride=" + std::to_string(c.b) +
          ", size=" + std::to_string(c.c) + ")";
      break;
    case CallOp::split_2d: s = "called split_2d(xrange=" + std::to_string(c.a) + ")"; break;
    case CallOp::team_destroy: s = "called team_destroy"; break;
    default: s = "called unknown operation " + std::to_string(int(c.op));
  }
  s += " on team " + std::to_string(c.team);
  if (c.team == kTeamWorld) s += " (world)";
  if (c.team == kTeamNode) s += " (node)";
  if (detail) {
    char id[32];
    std::snprintf(id, sizeof id, "%016llx", static_cast<unsigned long long>(c.team_id));
    s += " [its call #" + std::to_string(c.seq) + " on that barrier, team identity " + id + "]";
  }
  return s;
}

const char* noun(CallOp op) {
  switch (op) {
    case CallOp::alloc: return "symmetric allocation";
    case CallOp::free: return "symmetric free";
    case CallOp::split_strided: case CallOp::split_2d: return "team split";
    case CallOp::team_destroy: return "team destroy";
    default: return "collective call";
  }
}

const char* outcome(CallOp op) {
  switch (op) {
    case CallOp::alloc: case CallOp::free: return " Nothing was allocated or freed.";
    case CallOp::split_strided: case CallOp::split_2d: return " No team was made.";
    case CallOp::team_destroy: return " The team was not destroyed.";
    default: return "";
  }
}

std::string pe_list(const std::vector<int>& pes) {
  std::string s = pes.size() == 1 ? "PE " : "PEs ";
  for (std::size_t i = 0; i < pes.size(); ++i) {
    if (i) s += i + 1 == pes.size() ? " and " : ", ";
    s += std::to_string(pes[i]);
  }
  return s;
}

}  // namespace

void raise_mismatch(const std::vector<int>& members, const std::vector<CallWords>& calls, const CallWords& mine) {
  // The call count and the identity are shown only where they are what differs.
  bool detail = false;
  for (const CallWords& x : calls)
    for (const CallWords& y : calls) {
      CallWords a = x, b = y;
      a[2] = b[2] = a[6] = b[6] = 0;
      detail = detail || (a == b && x != y);
    }
  std::string what;
  std::vector<bool> done(calls.size(), false);
  for (std::size_t i = 0; i < calls.size(); ++i) {
    if (done[i]) continue;
    std::vector<int> same;
    for (std::size_t j = i; j < calls.size(); ++j)
      if (!done[j] && calls[j] == calls[i]) {
        same.push_back(members[j]);
        done[j] = true;
      }
    std::string d = describe(Call::unpack(calls[i].data()), detail);
    if (same.size() > 1 && d.rfind("rejected its", 0) == 0) d = "rejected their arguments (see their own errors)";
    if (!what.empty()) what += "; ";
    what += pe_list(same) + " " + d;
  }
  const CallOp op = Call::unpack(mine.data()).op;
  throw Error(ErrorKind::symmetry, std::string(noun(op)) + " differs between PEs: " + what + "." + outcome(op));
}

}  // namespace unishmem
