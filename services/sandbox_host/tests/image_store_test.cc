// ImageStore against oci-archives written here: layers shared between images unpacked once, blobs verified
// against their digests, platforms chosen from an index, images kept across a restart and removed with their
// unshared layers.
#include "services/sandbox_host/images/image_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "libs/core/testing/fake_clock.h"
#include "libs/core/testing/status_matchers.h"
#include "libs/core/unique_fd.h"
#include "services/sandbox_host/tests/layer_scratch.h"
#include "services/sandbox_host/tests/layer_writer.h"

namespace corral::sandbox {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// An OCI image layout written as an oci-archive: blobs by digest, then index.json.
class ArchiveWriter {
 public:
  explicit ArchiveWriter(const std::string& path) : a_(archive_write_new()) {
    archive_write_set_format_pax_restricted(a_);
    archive_write_open_filename(a_, path.c_str());
    Entry("oci-layout", R"({"imageLayoutVersion":"1.0.0"})");
  }
  ~ArchiveWriter() {
    archive_write_close(a_);
    archive_write_free(a_);
  }
  // Stores `bytes` under `name_as` (its own digest unless a test lies); returns the digest it is named by.
  std::string Blob(const std::string& bytes, std::string name_as = "") {
    if (name_as.empty()) name_as = Sha256Digest(bytes);
    Entry("blobs/sha256/" + name_as.substr(7), bytes);
    return name_as;
  }
  void Index(const std::string& json) { Entry("index.json", json); }

 private:
  void Entry(const std::string& path, const std::string& data) {
    archive_entry* e = archive_entry_new();
    archive_entry_set_pathname(e, path.c_str());
    archive_entry_set_filetype(e, AE_IFREG);
    archive_entry_set_perm(e, 0644);
    archive_entry_set_size(e, static_cast<la_int64_t>(data.size()));
    archive_write_header(a_, e);
    archive_write_data(a_, data.data(), data.size());
    archive_entry_free(e);
  }
  struct archive* a_;
};

class ImageStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "needs root (layers keep their owners; whiteouts are device nodes)";
    base_ = LayerScratchDir("corral-images-" + std::to_string(getpid()));
    if (base_.empty()) GTEST_SKIP() << "neither the temp directory nor /var/tmp can hold layers (overlayfs)";
    store_ = std::make_unique<ImageStore>((base_ / "store").string(), LayerLimits{}, &clock_);
  }
  void TearDown() override {
    store_.reset();
    if (!base_.empty()) fs::remove_all(base_);
  }

  // A gzip layer written by `fill`, as bytes.
  template <typename Fill>
  std::string Layer(Fill fill) {
    const std::string path = (base_ / "layer.tar.gz").string();
    {
      LayerWriter w(path, /*gzip=*/true);
      fill(w);
    }
    return Slurp(path);
  }

  // Writes an image of `layers` (bottom first) to an archive; returns its manifest's digest.
  std::string WriteImage(ArchiveWriter& out, const std::vector<std::string>& layers, const std::string& index_extra,
                         const std::string& platform = R"({"os":"linux","architecture":"amd64"})") {
    std::string layer_list, diff_ids;
    for (const std::string& layer : layers) {
      const std::string digest = out.Blob(layer);
      absl::StrAppend(&layer_list, layer_list.empty() ? "" : ",",
                      R"({"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")", digest,
                      R"(","size":)", layer.size(), "}");
      absl::StrAppend(&diff_ids, diff_ids.empty() ? "" : ",", "\"", digest, "\"");  // any digest: not checked yet
    }
    const std::string config = out.Blob(absl::StrCat(
        R"({"os":"linux","architecture":"amd64","config":{"Env":["PATH=/usr/bin:/bin","LANG=C.UTF-8"],)",
        R"("WorkingDir":"/work","User":"1000:1000","Cmd":["/bin/sh"]},"rootfs":{"type":"layers","diff_ids":[)",
        diff_ids, "]}}"));
    const std::string manifest = out.Blob(absl::StrCat(
        R"({"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":)",
        R"("application/vnd.oci.image.config.v1+json","digest":")", config, R"(","size":1},"layers":[)", layer_list,
        "]}"));
    out.Index(
        absl::StrCat(R"({"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json",)",
                     R"("digest":")", manifest, R"(","size":1,"platform":)", platform, index_extra, "}]}"));
    return manifest;
  }

  absl::StatusOr<Image> Import(const std::string& archive, const std::string& ref = "") {
    UniqueFd fd(open(archive.c_str(), O_RDONLY | O_CLOEXEC));
    return store_->ImportArchive(fd.get(), ref);
  }

  std::string Base() {
    return Layer([](LayerWriter& w) { w.File("etc/os-release", "ID=test\n").File("etc/motd", "hi\n").Dir("work"); });
  }

  fs::path base_;
  FakeClock clock_;
  std::unique_ptr<ImageStore> store_;
};

TEST_F(ImageStoreTest, AnArchiveIsImportedWithItsConfigAndEachSharedLayerUnpackedOnce) {
  const std::string base = Base();
  const std::string app_archive = (base_ / "app.tar").string();
  std::string app_digest;
  {
    ArchiveWriter out(app_archive);
    app_digest =
        WriteImage(out, {base, Layer([](LayerWriter& w) { w.File("etc/.wh.motd", "").File("app.py", "print(1)"); })},
                   R"(,"annotations":{"org.opencontainers.image.ref.name":"example.com/app:1"})");
  }
  auto app = Import(app_archive);
  ASSERT_THAT(app, IsOk());
  EXPECT_EQ(app->digest, app_digest);
  EXPECT_THAT(app->refs, ElementsAre("example.com/app:1"));  // from the annotation
  EXPECT_THAT(app->config.env, ElementsAre("PATH=/usr/bin:/bin", "LANG=C.UTF-8"));
  EXPECT_EQ(app->config.working_dir, "/work");
  EXPECT_EQ(app->config.user, "1000:1000");
  EXPECT_EQ(app->size_bytes, std::string("ID=test\nhi\nprint(1)").size());
  auto lower = store_->LowerDirs(app->digest);
  ASSERT_THAT(lower, IsOk());
  ASSERT_EQ(lower->size(), 2u);
  EXPECT_EQ(Slurp(fs::path((*lower)[0]) / "app.py"), "print(1)");  // top first
  EXPECT_EQ(Slurp(fs::path((*lower)[1]) / "etc/os-release"), "ID=test\n");
  struct stat st {};
  ASSERT_EQ(lstat((fs::path((*lower)[0]) / "etc/motd").c_str(), &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));  // the top layer deletes the base's motd

  // A second image on the same base: its layer is the same directory, not a second copy.
  ASSERT_EQ(stat((*lower)[1].c_str(), &st), 0);
  const ino_t base_inode = st.st_ino;
  const std::string tool_archive = (base_ / "tool.tar").string();
  {
    ArchiveWriter out(tool_archive);
    WriteImage(out, {base, Layer([](LayerWriter& w) { w.File("tool", "t"); })}, "");
  }
  auto tool = Import(tool_archive, "example.com/tool:2");
  ASSERT_THAT(tool, IsOk());
  EXPECT_THAT(tool->refs, ElementsAre("example.com/tool:2"));
  auto tool_lower = store_->LowerDirs("example.com/tool:2");
  ASSERT_THAT(tool_lower, IsOk());
  EXPECT_EQ((*tool_lower)[1], (*lower)[1]);
  ASSERT_EQ(stat((*tool_lower)[1].c_str(), &st), 0);
  EXPECT_EQ(st.st_ino, base_inode);
  EXPECT_EQ(store_->List().size(), 2u);
}

TEST_F(ImageStoreTest, ABlobWhoseContentIsNotItsDigestIsRefusedAndNotStored) {
  const std::string archive = (base_ / "bad.tar").string();
  const std::string lie = Sha256Digest("something else entirely");
  {
    ArchiveWriter out(archive);
    out.Blob("tampered layer bytes", lie);
    out.Index("{}");
  }
  EXPECT_THAT(Import(archive), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("blob " + lie + " has content")));
  EXPECT_FALSE(fs::exists(base_ / "store/blobs/sha256" / lie.substr(7)));
  EXPECT_TRUE(fs::is_empty(base_ / "store/blobs/sha256"));  // no temporary left behind either
}

TEST_F(ImageStoreTest, MissingBlobsWrongPlatformsAndGarbageAreRefusedByName) {
  const std::string missing = (base_ / "missing.tar").string();
  {
    ArchiveWriter out(missing);
    out.Index(absl::StrCat(R"({"manifests":[{"digest":")", Sha256Digest("absent"), R"("}]})"));
  }
  EXPECT_THAT(Import(missing),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("lacks blob " + Sha256Digest("absent"))));

  const std::string arm = (base_ / "arm.tar").string();
  {
    ArchiveWriter out(arm);
    WriteImage(out, {Base()}, "", R"({"os":"linux","architecture":"arm64"})");
  }
  EXPECT_THAT(Import(arm),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no linux/amd64 manifest (it has: linux/arm64)")));

  const std::string garbage = (base_ / "garbage.tar").string();
  std::ofstream(garbage) << std::string(3000, 'g');
  EXPECT_THAT(Import(garbage), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_TRUE(store_->List().empty());
}

TEST_F(ImageStoreTest, ImagesSurviveARestartAndRemovingOneKeepsTheLayersAnotherUses) {
  const std::string base = Base();
  for (const char* name : {"a", "b"}) {
    const std::string archive = (base_ / absl::StrCat(name, ".tar")).string();
    {
      ArchiveWriter out(archive);
      WriteImage(out, {base, Layer([&](LayerWriter& w) { w.File(name, name); })}, "");
    }
    ASSERT_THAT(Import(archive, absl::StrCat("local/", name)), IsOk());
  }
  store_ = std::make_unique<ImageStore>((base_ / "store").string(), LayerLimits{}, &clock_);  // a restart
  auto a = store_->Find("local/a");
  ASSERT_THAT(a, IsOk());
  EXPECT_EQ(a->config.working_dir, "/work");
  auto a_lower = store_->LowerDirs(a->digest);
  ASSERT_THAT(a_lower, IsOk());

  ASSERT_THAT(store_->Remove("local/a"), IsOk());
  EXPECT_THAT(store_->Find("local/a"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(fs::exists((*a_lower)[0]));  // its own layer went
  EXPECT_TRUE(fs::exists((*a_lower)[1]));   // the base stays: local/b uses it
  EXPECT_THAT(store_->Find("local/b"), IsOk());
  EXPECT_THAT(store_->Remove("local/a"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ImageStoreTest, PastTheBudgetTheLeastRecentlyUsedImageNoSandboxUsesGoes) {
  // Three images of one 1 MB layer each (no shared base); a budget of two.
  std::vector<std::string> archives;
  for (const char* name : {"a", "b", "c"}) {
    archives.push_back((base_ / absl::StrCat(name, ".tar")).string());
    ArchiveWriter out(archives.back());
    WriteImage(out, {Layer([&](LayerWriter& w) { w.File(name, std::string(1'000'000, name[0])); })}, "");
  }
  store_ = std::make_unique<ImageStore>((base_ / "store").string(), LayerLimits{}, &clock_, 2'500'000);
  auto a = Import(archives[0], "local/a");
  ASSERT_THAT(a, IsOk());
  clock_.Advance(absl::Seconds(1));
  auto b = Import(archives[1], "local/b");
  ASSERT_THAT(b, IsOk());
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(store_->Pin(a->digest), IsOk());  // a sandbox uses a: it is now the most recent, and kept
  clock_.Advance(absl::Seconds(1));
  ASSERT_THAT(Import(archives[2], "local/c"), IsOk());
  EXPECT_THAT(store_->Find("local/b"), StatusIs(absl::StatusCode::kNotFound));  // least recently used
  EXPECT_THAT(store_->Find("local/a"), IsOk());
  EXPECT_THAT(store_->Find("local/c"), IsOk());
  EXPECT_EQ(store_->used_bytes(), 2'000'000u);
  // Every other image in use: the new one is kept over the budget rather than refused.
  ASSERT_THAT(store_->Pin(Import(archives[2], "local/c")->digest), IsOk());
  ASSERT_THAT(Import(archives[1], "local/b"), IsOk());
  EXPECT_EQ(store_->used_bytes(), 3'000'000u);
  EXPECT_THAT(store_->Remove("local/a"), StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("in use")));
  store_->Unpin(a->digest);
  EXPECT_THAT(store_->Remove("local/a"), IsOk());
}

TEST(OciImage, DigestsAndDocumentsAreValidated) {
  EXPECT_THAT(ValidateDigest(Sha256Digest("x")), IsOk());
  EXPECT_THAT(ValidateDigest("sha512:abc"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ValidateDigest("sha256:" + std::string(64, 'A')), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIndex("not json"), StatusIs(absl::StatusCode::kInvalidArgument));
  EXPECT_THAT(ParseIndex(R"({"manifests":[]})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no manifests")));
  EXPECT_THAT(ParseManifest(R"({"layers":[]})"), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no config")));
  EXPECT_THAT(ParseManifest(absl::StrCat(R"({"config":{"digest":")", Sha256Digest("c"),
                                         R"("},"layers":[{"mediaType":"application/vnd.oci.image.config.v1+json",)",
                                         R"("digest":")", Sha256Digest("l"), R"("}]})")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a tar layer")));
  EXPECT_THAT(ParseImageConfig(R"({"os":"windows"})"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not linux")));
}

}  // namespace
}  // namespace corral::sandbox
