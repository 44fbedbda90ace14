// A point's profile as rows of nsys-style tables (CUPTI_ACTIVITY_KIND_*, NVTX_EVENTS, StringIds, ...), written
// inside add_point's transaction and read back in the order stored.
#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "db/store_sql.h"

namespace moc::db::internal {

namespace {

// StringIds while a point is written: each distinct name is looked up (or inserted) once per point, then
// served from memory (kernel names repeat millions of times). Keys view the caller's strings, which outlive
// it. Per point on purpose: a point rolled back takes its new StringIds rows with it.
class StringIdWriter {
 public:
  StringIdWriter(sqlite3* db, const std::string& path, const std::string& of)
      : db_(db),
        find_(db, path, "SELECT id FROM StringIds WHERE value = ?", "add_point: looking up a name" + of),
        insert_(db, path, "INSERT INTO StringIds (value) VALUES (?)", "add_point: recording a name" + of) {}
  std::int64_t id(const std::string& value) {
    if (const auto it = ids_.find(value); it != ids_.end()) return it->second;
    find_.bind(1, value);
    std::int64_t id = 0;
    if (find_.step(value)) {
      id = find_.i64(0);
      find_.reset();
    } else {
      find_.reset();
      insert_.bind(1, value).exec(value);
      id = sqlite3_last_insert_rowid(db_);
    }
    ids_.emplace(std::string_view(value), id);
    return id;
  }

 private:
  sqlite3* db_;
  Stmt find_, insert_;
  std::unordered_map<std::string_view, std::int64_t> ids_;
};

// StringIds while a profile is read: each id is read once.
class StringIdReader {
 public:
  StringIdReader(sqlite3* db, const std::string& path, const std::string& of)
      : path_(path),
        q_(db, path, "SELECT value FROM StringIds WHERE id = ?", "profile: reading a name" + of),
        of_(of) {}
  const std::string& value(std::int64_t id) {
    if (const auto it = values_.find(id); it != values_.end()) return it->second;
    q_.bind(1, id);
    if (!q_.step())
      throw DbError(in_quotes(path_) + ": profile: a record" + of_ + " names string id " + std::to_string(id) +
                    ", which StringIds does not have");
    std::string v = q_.text(0);
    q_.reset();
    return values_.emplace(id, std::move(v)).first->second;
  }

 private:
  const std::string& path_;
  Stmt q_;
  std::string of_;
  std::unordered_map<std::int64_t, std::string> values_;
};


// nsys's NVTX_EVENTS.eventType of a push/pop range (NvtxPushPopRange).
constexpr int kNvtxPushPopRange = 59;

// The columns of a profile table and how a record's fields go into them and come back: the mapping between
// a record and its row is written once, here, and both write_trace and read_trace follow it. Each column is
// a type (its field a template argument), so a table's row is bound and read by code the compiler unrolls:
// no call through a pointer per value (a table of function pointers wrote and read ~10% slower).

// SQLite integers are signed 64-bit: unsigned ids go through u32 / u64 (store_sql.h) and come back exactly.
inline std::int64_t to_row(std::int64_t v) { return v; }
inline int to_row(int v) { return v; }
inline std::int64_t to_row(std::uint32_t v) { return u32(v); }
inline std::int64_t to_row(std::uint64_t v) { return u64(v); }
inline int to_row(bool v) { return v ? 1 : 0; }
inline const std::string& to_row(const std::string& v) { return v; }
inline void from_row(const Stmt& q, int i, std::int64_t& v) { v = q.i64(i); }
inline void from_row(const Stmt& q, int i, int& v) { v = q.i32(i); }
inline void from_row(const Stmt& q, int i, std::uint32_t& v) { v = to_u32(q.i64(i)); }
inline void from_row(const Stmt& q, int i, std::uint64_t& v) { v = to_u64(q.i64(i)); }
inline void from_row(const Stmt& q, int i, bool& v) { v = q.i32(i) != 0; }
inline void from_row(const Stmt& q, int i, std::string& v) { v = q.text(i); }

// A field stored as it is (integers, text); Since: the schema version that added the column.
template <auto M, int Since = 0>
struct Field {
  const char* name;
  static constexpr int since = Since;
  static constexpr bool readable = true;
  template <class R>
  static void bind(Stmt& q, int i, const R& r, StringIdWriter&) {
    q.bind(i, to_row(r.*M));
  }
  template <class R>
  static void read(const Stmt& q, int i, R& r, StringIdReader&) {
    from_row(q, i, r.*M);
  }
};

// A name stored as its StringIds id (kernel names repeat millions of times); Nullable: "" is NULL.
template <auto M, bool Nullable = false, int Since = 0>
struct Name {
  const char* name;
  static constexpr int since = Since;
  static constexpr bool readable = true;
  template <class R>
  static void bind(Stmt& q, int i, const R& r, StringIdWriter& names) {
    if (Nullable && (r.*M).empty()) q.bind_null(i);
    else q.bind(i, names.id(r.*M));
  }
  template <class R>
  static void read(const Stmt& q, int i, R& r, StringIdReader& names) {
    if (!(Nullable && q.is_null(i))) r.*M = names.value(q.i64(i));
  }
};

// A column nsys has and mocbench writes as a constant (not read back).
template <int V>
struct Constant {
  const char* name;
  static constexpr int since = 0;
  static constexpr bool readable = false;
  template <class R>
  static void bind(Stmt& q, int i, const R&, StringIdWriter&) {
    q.bind(i, V);
  }
  template <class R>
  static void read(const Stmt&, int, R&, StringIdReader&) {}
};

// CUDA_GPU_MEMORY_USAGE_EVENTS.memoryOperationType: "alloc" or "free".
struct AllocOrFree {
  const char* name;
  static constexpr int since = 0;
  static constexpr bool readable = true;
  static void bind(Stmt& q, int i, const prof::DeviceMemoryRecord& r, StringIdWriter&) {
    static const std::string alloc = "alloc", free = "free";
    q.bind(i, r.is_alloc ? alloc : free);
  }
  static void read(const Stmt& q, int i, prof::DeviceMemoryRecord& r, StringIdReader&) {
    r.is_alloc = q.text(i) == "alloc";
  }
};

template <class R, class... Cols>
struct RowTable {
  const char* table;
  const char* noun;  // one row, for messages: "kernel"
  const char* what;  // the rows, for messages: "the kernels"
  std::vector<R> prof::ProfileTrace::*records;
  int since;  // the schema version that added the table
  std::tuple<Cols...> cols;
};
template <class R, class... Cols>
RowTable<R, Cols...> rows(const char* table, const char* noun, const char* what,
                          std::vector<R> prof::ProfileTrace::*records, int since, Cols... cols) {
  return {table, noun, what, records, since, {cols...}};
}

using prof::KernelRecord, prof::MemcpyRecord, prof::MemsetRecord, prof::ApiRecord, prof::DeviceMemoryRecord,
    prof::PhaseRange, prof::AllocatorEvent, prof::StageRecord, prof::ProfileTrace;
using K = KernelRecord;
using MC = MemcpyRecord;
using MS = MemsetRecord;
using DM = DeviceMemoryRecord;

const auto kKernels = rows(
    "CUPTI_ACTIVITY_KIND_KERNEL", "kernel", "the kernels", &ProfileTrace::kernels, 0,
    Field<&K::start_ns>{"start"}, Field<&K::end_ns>{"end"}, Field<&K::device_id>{"deviceId"},
    Field<&K::context_id>{"contextId"}, Field<&K::stream_id>{"streamId"}, Field<&K::correlation_id>{"correlationId"},
    Name<&K::name>{"demangledName"}, Name<&K::short_name>{"shortName"}, Field<&K::grid_x>{"gridX"},
    Field<&K::grid_y>{"gridY"}, Field<&K::grid_z>{"gridZ"}, Field<&K::block_x>{"blockX"}, Field<&K::block_y>{"blockY"},
    Field<&K::block_z>{"blockZ"}, Field<&K::registers_per_thread>{"registersPerThread"},
    Field<&K::static_shared_bytes>{"staticSharedMemory"}, Field<&K::dynamic_shared_bytes>{"dynamicSharedMemory"},
    Field<&K::graph_id>{"graphId"}, Field<&K::graph_node_id>{"graphNodeId"}, Field<&K::range_id>{"rangeId"},
    Field<&K::step>{"step"},
    // Version 7: the op each kernel belongs to and what it declared (the roofline).
    Name<&K::op, true, 7>{"opName"}, Field<&K::op_bytes, 7>{"opBytes"}, Field<&K::op_flops, 7>{"opFlops"},
    Field<&K::op_call, 7>{"opCall"}, Field<&K::op_bound, 7>{"opBound"});

const auto kMemcpys = rows(
    "CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy", "the memcpys", &ProfileTrace::memcpys, 0, Field<&MC::start_ns>{"start"},
    Field<&MC::end_ns>{"end"}, Field<&MC::device_id>{"deviceId"}, Field<&MC::context_id>{"contextId"},
    Field<&MC::stream_id>{"streamId"}, Field<&MC::correlation_id>{"correlationId"}, Field<&MC::bytes>{"bytes"},
    Field<&MC::copy_kind>{"copyKind"}, Field<&MC::src_kind>{"srcKind"}, Field<&MC::dst_kind>{"dstKind"},
    Field<&MC::graph_id>{"graphId"}, Field<&MC::graph_node_id>{"graphNodeId"}, Field<&MC::range_id>{"rangeId"},
    Field<&MC::step>{"step"});

const auto kMemsets = rows(
    "CUPTI_ACTIVITY_KIND_MEMSET", "memset", "the memsets", &ProfileTrace::memsets, 0, Field<&MS::start_ns>{"start"},
    Field<&MS::end_ns>{"end"}, Field<&MS::device_id>{"deviceId"}, Field<&MS::context_id>{"contextId"},
    Field<&MS::stream_id>{"streamId"}, Field<&MS::correlation_id>{"correlationId"}, Field<&MS::bytes>{"bytes"},
    Field<&MS::value>{"value"}, Field<&MS::mem_kind>{"memKind"}, Field<&MS::graph_id>{"graphId"},
    Field<&MS::graph_node_id>{"graphNodeId"}, Field<&MS::range_id>{"rangeId"}, Field<&MS::step>{"step"});

const auto kApi = rows("CUPTI_ACTIVITY_KIND_RUNTIME", "API call", "the CUDA API calls", &ProfileTrace::api, 0,
                       Field<&ApiRecord::start_ns>{"start"}, Field<&ApiRecord::end_ns>{"end"},
                       Name<&ApiRecord::name>{"nameId"}, Field<&ApiRecord::domain>{"domain"},
                       Field<&ApiRecord::correlation_id>{"correlationId"}, Field<&ApiRecord::thread_id>{"globalTid"},
                       Field<&ApiRecord::return_value>{"returnValue"});

const auto kDeviceMemory = rows(
    "CUDA_GPU_MEMORY_USAGE_EVENTS", "device memory event", "the device memory events", &ProfileTrace::device_memory, 0,
    Field<&DM::t_ns>{"start"}, Field<&DM::device_id>{"deviceId"}, Field<&DM::context_id>{"contextId"},
    Field<&DM::stream_id>{"streamId"}, Field<&DM::correlation_id>{"correlationId"}, Field<&DM::address>{"address"},
    Field<&DM::bytes>{"bytes"}, AllocOrFree{"memoryOperationType"}, Field<&DM::mem_kind>{"memKind"});

// nsys's columns: start / end are the host times, projStart / projEnd the device projection.
const auto kRanges = rows(
    "NVTX_EVENTS", "phase range", "the phase ranges", &ProfileTrace::ranges, 0,
    Field<&PhaseRange::host_start_ns>{"start"}, Field<&PhaseRange::host_end_ns>{"end"},
    Constant<kNvtxPushPopRange>{"eventType"}, Field<&PhaseRange::id>{"rangeId"}, Field<&PhaseRange::name>{"text"},
    Constant<0>{"globalTid"}, Constant<0>{"domainId"}, Field<&PhaseRange::parent_id>{"parentId"},
    Field<&PhaseRange::depth>{"depth"}, Field<&PhaseRange::step>{"step"}, Field<&PhaseRange::start_ns>{"projStart"},
    Field<&PhaseRange::end_ns>{"projEnd"}, Field<&PhaseRange::ops>{"numGpuOps"});

const auto kAllocator = rows(
    "ALLOCATOR_EVENTS", "allocator event", "the allocator events", &ProfileTrace::allocator, 0,
    Field<&AllocatorEvent::t_ns>{"start"}, Field<&AllocatorEvent::category>{"category"},
    Field<&AllocatorEvent::module>{"module"}, Field<&AllocatorEvent::layer>{"layer"},
    Field<&AllocatorEvent::bytes>{"bytes"}, Field<&AllocatorEvent::category_live_bytes>{"categoryLiveBytes"});

// Version 6: the decode kernels' device-side stage stamps.
const auto kStages = rows(
    "STAGE_STAMPS", "stage stamp", "the stage stamps", &ProfileTrace::stages, 6, Field<&StageRecord::step>{"step"},
    Name<&StageRecord::kernel>{"kernel"}, Field<&StageRecord::launch>{"launch"},
    Field<&StageRecord::range_id>{"rangeId"}, Field<&StageRecord::layer>{"layer"}, Name<&StageRecord::stage>{"stage"},
    Field<&StageRecord::start_ns>{"start"}, Field<&StageRecord::end_ns>{"end"}, Field<&StageRecord::wait_ns>{"waitNs"});

template <class R, class... Cols>
void write_rows(sqlite3* db, const std::string& path, std::int64_t point_id, const ProfileTrace& t,
                const RowTable<R, Cols...>& tb, StringIdWriter& names, const std::string& of) {
  std::string cols = "point_id", marks = "?";
  std::apply([&](const auto&... c) { ((cols += std::string(", ") + c.name, marks += ", ?"), ...); }, tb.cols);
  const std::string sql = std::string("INSERT INTO ") + tb.table + " (" + cols + ") VALUES (" + marks + ")";
  Stmt q(db, path, sql.c_str(), std::string("add_point: recording ") + tb.what + of);
  const auto& rows = t.*tb.records;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    q.bind(1, point_id);
    int k = 2;
    std::apply([&](const auto&... c) { (c.bind(q, k++, rows[i], names), ...); }, tb.cols);
    q.exec_row(tb.noun, i);
  }
}

// The columns the file's schema version has (a version 5 or 6 file is read as it is).
template <class R, class... Cols>
void read_rows(sqlite3* db, const std::string& path, std::int64_t point_id, int schema_version,
               const RowTable<R, Cols...>& tb, StringIdReader& names, ProfileTrace& t, const std::string& of) {
  if (schema_version < tb.since) return;
  auto has = [&](const auto& c) { return c.readable && schema_version >= c.since; };
  std::string sql;
  std::apply([&](const auto&... c) { ((has(c) ? void(sql += (sql.empty() ? "" : ", ") + std::string(c.name)) : void()), ...); },
             tb.cols);
  sql = "SELECT " + sql + " FROM " + tb.table + " WHERE point_id = ? ORDER BY id";
  Stmt q(db, path, sql.c_str(), std::string("profile: reading ") + tb.what + of);
  q.bind(1, point_id);
  auto& rows = t.*tb.records;
  while (q.step()) {
    R r;
    int k = 0;
    std::apply([&](const auto&... c) { ((has(c) ? c.read(q, k++, r, names) : void()), ...); }, tb.cols);
    rows.push_back(std::move(r));
  }
}

}  // namespace

void write_trace(sqlite3* db, const std::string& path, std::int64_t point_id, const prof::ProfileTrace& t,
                 const std::string& of) {
  Stmt(db, path,
       "INSERT INTO profiles (point_id, source, steps, start, end, droppedRecords, droppedStamps) "
       "VALUES (?, ?, ?, ?, ?, ?, ?)",
       "add_point: recording the profile" + of)
      .bind(1, point_id)
      .bind(2, t.source)
      .bind(3, t.steps)
      .bind(4, t.start_ns)
      .bind(5, t.end_ns)
      .bind(6, u64(t.dropped_records))
      .bind(7, u64(t.dropped_stamps))
      .exec();
  StringIdWriter names(db, path, of);
  write_rows(db, path, point_id, t, kStages, names, of);
  write_rows(db, path, point_id, t, kKernels, names, of);
  write_rows(db, path, point_id, t, kMemcpys, names, of);
  write_rows(db, path, point_id, t, kMemsets, names, of);
  write_rows(db, path, point_id, t, kApi, names, of);
  write_rows(db, path, point_id, t, kDeviceMemory, names, of);
  write_rows(db, path, point_id, t, kRanges, names, of);
  write_rows(db, path, point_id, t, kAllocator, names, of);
}

std::optional<prof::ProfileTrace> read_trace(sqlite3* db, const std::string& path, std::int64_t point_id,
                                             int schema_version) {
  const std::string of = " of point id " + std::to_string(point_id);
  // One snapshot for every table, as points() does.
  Transaction tx(db, path, "BEGIN", "profile: reading the profile" + of);
  prof::ProfileTrace t;
  {
    const bool v6 = schema_version >= 6;  // version 5 (read as it is) has no stage stamps
    Stmt q(db, path,
           v6 ? "SELECT source, steps, start, end, droppedRecords, droppedStamps FROM profiles WHERE point_id = ?"
              : "SELECT source, steps, start, end, droppedRecords, 0 FROM profiles WHERE point_id = ?",
           "profile: reading the profile" + of);
    q.bind(1, point_id);
    if (!q.step()) {
      q.reset();
      tx.commit();
      return std::nullopt;
    }
    t.source = q.text(0);
    t.steps = q.i32(1);
    t.start_ns = q.i64(2);
    t.end_ns = q.i64(3);
    t.dropped_records = to_u64(q.i64(4));
    t.dropped_stamps = to_u64(q.i64(5));
  }
  StringIdReader names(db, path, of);
  read_rows(db, path, point_id, schema_version, kKernels, names, t, of);
  read_rows(db, path, point_id, schema_version, kMemcpys, names, t, of);
  read_rows(db, path, point_id, schema_version, kMemsets, names, t, of);
  read_rows(db, path, point_id, schema_version, kApi, names, t, of);
  read_rows(db, path, point_id, schema_version, kDeviceMemory, names, t, of);
  read_rows(db, path, point_id, schema_version, kRanges, names, t, of);
  read_rows(db, path, point_id, schema_version, kAllocator, names, t, of);
  read_rows(db, path, point_id, schema_version, kStages, names, t, of);
  tx.commit();
  return t;
}

}  // namespace moc::db::internal
