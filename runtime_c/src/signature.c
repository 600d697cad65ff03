/* Checking a pack's Ed25519 signature (tccrt_pack_open_file_signed; docs/security.md), as
 * tcc/rt/signature.py does and with its messages.  `manifest.sig` signs the exact bytes of
 * manifest.json, which holds every other member's size and sha256; the check runs right
 * after the tar headers are read, before the manifest is parsed.  The cryptography is the
 * system's libcrypto (OpenSSL 3), loaded with dlopen on first use: without it a signature
 * cannot be checked, and asking for one is an error. */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pack_internal.h"
#include "tccrt_pack.h"

#define NID_ED25519 1087 /* OpenSSL's EVP_PKEY_ED25519 */
#define MAKE_PUBLIC_KEY "openssl pkey -in key.pem -pubout -out key.pub"

static struct {
  void *(*bio_new_mem_buf)(const void *, int);
  int (*bio_free)(void *);
  void *(*pem_read_bio_pubkey)(void *, void **, void *, void *);
  int (*pkey_get_id)(const void *);
  void (*pkey_free)(void *);
  void *(*md_ctx_new)(void);
  void (*md_ctx_free)(void *);
  int (*digest_verify_init)(void *, void **, const void *, void *, void *);
  int (*digest_verify)(void *, const unsigned char *, size_t, const unsigned char *, size_t);
  void (*err_clear_error)(void);
  char why[256];
  int ok;
} crypto;
static pthread_once_t crypto_once = PTHREAD_ONCE_INIT;

static void load_crypto(void) {
  void *lib = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(crypto.why, sizeof crypto.why, "%s", dlerror());
    return;
  }
  struct {
    void *slot;
    const char *name;
  } fns[] = {{&crypto.bio_new_mem_buf, "BIO_new_mem_buf"}, {&crypto.bio_free, "BIO_free"},
             {&crypto.pem_read_bio_pubkey, "PEM_read_bio_PUBKEY"}, {&crypto.pkey_get_id, "EVP_PKEY_get_id"},
             {&crypto.pkey_free, "EVP_PKEY_free"}, {&crypto.md_ctx_new, "EVP_MD_CTX_new"},
             {&crypto.md_ctx_free, "EVP_MD_CTX_free"}, {&crypto.digest_verify_init, "EVP_DigestVerifyInit"},
             {&crypto.digest_verify, "EVP_DigestVerify"}, {&crypto.err_clear_error, "ERR_clear_error"}};
  for (size_t i = 0; i < sizeof fns / sizeof *fns; i++) {
    void *fn = dlsym(lib, fns[i].name);
    if (!fn) {
      snprintf(crypto.why, sizeof crypto.why, "libcrypto.so.3 has no %s", fns[i].name);
      return; /* the library stays loaded: OpenSSL must not be unloaded once used */
    }
    memcpy(fns[i].slot, &fn, sizeof fn); /* POSIX: object pointers convert to function pointers */
  }
  crypto.ok = 1;
}

tccrt_status_t tccrt_public_key_load(const char *key_path, tccrt_public_key_t *out) {
  memset(out, 0, sizeof *out);
  pthread_once(&crypto_once, load_crypto);
  if (!crypto.ok)
    return tccrt_fail(TCCRT_IO_ERROR, "--require-signature needs OpenSSL 3's libcrypto, which cannot be "
                      "loaded: %s; install OpenSSL 3 (libcrypto.so.3)", crypto.why);
  FILE *f = fopen(key_path, "rb");
  if (!f) return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot read the public key: %s", key_path, strerror(errno));
  static const size_t MAX_KEY = 1 << 20;
  char *pem = malloc(MAX_KEY);
  size_t n = pem ? fread(pem, 1, MAX_KEY, f) : 0;
  int read_error = ferror(f);
  fclose(f);
  if (!pem) return tccrt_fail(TCCRT_OUT_OF_MEMORY, "%s: out of memory", key_path);
  if (read_error) {
    free(pem);
    return tccrt_fail(TCCRT_IO_ERROR, "%s: cannot read the public key: I/O error", key_path);
  }
  void *bio = crypto.bio_new_mem_buf(pem, (int)n);
  void *key = bio ? crypto.pem_read_bio_pubkey(bio, NULL, NULL, NULL) : NULL;
  if (bio) crypto.bio_free(bio);
  free(pem);
  crypto.err_clear_error();
  if (!key || crypto.pkey_get_id(key) != NID_ED25519) {
    if (key) crypto.pkey_free(key);
    return tccrt_fail(TCCRT_INVALID_ARGUMENT, "%s: not an Ed25519 public key in PEM format; make one with: "
                      MAKE_PUBLIC_KEY, key_path);
  }
  out->key = key;
  return TCCRT_OK;
}

void tccrt_public_key_free(tccrt_public_key_t *key) {
  if (key->key) crypto.pkey_free(key->key);
  key->key = NULL;
}

tccrt_status_t tccrt_signature_check(const tccrt_pack_t *pack, const tccrt_public_key_t *key) {
  const tccrt_member_t *sig = tccrt_pack_find_member(pack, TCCRT_SIGNATURE);
  const tccrt_member_t *manifest = tccrt_pack_find_member(pack, TCCRT_MANIFEST);
  if (!manifest || manifest->size > TCCRT_MAX_MANIFEST_BYTES) return TCCRT_OK; /* the manifest check says why */
  if (sig && sig->size != TCCRT_SIGNATURE_BYTES)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: " TCCRT_SIGNATURE " is %zu bytes, not the %d of an Ed25519 signature",
                      pack->path, sig->size, TCCRT_SIGNATURE_BYTES);
  if (!key || !key->key) return TCCRT_OK;
  if (!sig)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: the pack is not signed (no " TCCRT_SIGNATURE "); sign it with "
                      "`tcc compile --sign KEY`, or run it without --require-signature", pack->path);
  void *ctx = crypto.md_ctx_new();
  int ok = ctx && crypto.digest_verify_init(ctx, NULL, NULL, NULL, key->key) == 1 &&
           crypto.digest_verify(ctx, pack->data + sig->offset, sig->size, pack->data + manifest->offset,
                                manifest->size) == 1;
  if (ctx) crypto.md_ctx_free(ctx);
  crypto.err_clear_error();
  if (!ok)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: the signature does not match the public key (the pack was "
                      "changed after signing, or signed with another key)", pack->path);
  return TCCRT_OK;
}
