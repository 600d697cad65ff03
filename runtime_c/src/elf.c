/* Just enough ELF to check a pack's shared object before anything loads it (tcc/rt/elf.py
 * is the same check, with the same messages): an ELF64 little-endian shared object whose
 * dynamic symbol table defines tcc_last_error, tcc_set_num_threads and every kernel of the
 * kernel table, for the machine the target's triple names.  dlopen runs an object's
 * constructors before any symbol can be looked up, so this runs at verification.  It
 * catches mistakes and corruption, not a crafted object; signatures do (docs/security.md). */
#include <stdio.h>
#include <string.h>

#include "pack_internal.h"

enum { EHDR_SIZE = 64, SHDR_SIZE = 64, SYM_SIZE = 24, SHT_DYNSYM = 11, ET_DYN = 3, STT_FUNC = 2 };

static uint16_t u16(const uint8_t *p) { return (uint16_t)(p[0] | p[1] << 8); }
static uint32_t u32(const uint8_t *p) { return (uint32_t)u16(p) | (uint32_t)u16(p + 2) << 16; }
static uint64_t u64(const uint8_t *p) { return (uint64_t)u32(p) | (uint64_t)u32(p + 4) << 32; }

static const struct {
  const char *arch;
  unsigned machine;
} MACHINES[] = {{"x86_64", 62}, {"amd64", 62}, {"aarch64", 183}, {"arm64", 183}, {"riscv64", 243}};

static const char *canonical_arch(const char *arch) {
  if (!strcmp(arch, "amd64")) return "x86_64";
  if (!strcmp(arch, "arm64")) return "aarch64";
  return arch;
}

int tccrt_triple_architecture(const char *target, char *out, size_t out_size) {
  const char *p = strstr(target, "-mtriple=");
  while (p && p != target && p[-1] != ' ') p = strstr(p + 1, "-mtriple=");
  if (!p) return 0;
  p += strlen("-mtriple=");
  size_t n = strcspn(p, "- ");
  if (n >= out_size) n = out_size - 1;
  for (size_t i = 0; i < n; i++) out[i] = (char)(p[i] >= 'A' && p[i] <= 'Z' ? p[i] + 32 : p[i]);
  out[n] = '\0';
  const char *canonical = canonical_arch(out);
  if (canonical != out) snprintf(out, out_size, "%s", canonical);
  return 1;
}

const char *tccrt_host_architecture(void) {
#if defined(__x86_64__)
  return "x86_64";
#elif defined(__aarch64__)
  return "aarch64";
#elif defined(__riscv) && __riscv_xlen == 64
  return "riscv64";
#else
  return "unknown";
#endif
}

/* Does the symbol table define function `name`? */
typedef struct {
  const uint8_t *syms, *strings;
  size_t count, strings_size;
} dynsym_t;

static int defines(const dynsym_t *t, const char *name) {
  size_t len = strlen(name);
  for (size_t k = 0; k < t->count; k++) {
    const uint8_t *s = t->syms + k * SYM_SIZE;
    uint32_t at = u32(s);
    unsigned info = s[4], bind = info >> 4;
    if (u16(s + 6) == 0 || (info & 0xf) != STT_FUNC || (bind != 1 && bind != 2)) continue;
    if (at < t->strings_size && len < t->strings_size - at && !memcmp(t->strings + at, name, len + 1)) return 1;
  }
  return 0;
}

#define ELF_BAD(what) \
  tccrt_fail(TCCRT_INVALID_PACK, "%s: %s " what "; compile the pack again", pack->path, member->name)

tccrt_status_t tccrt_elf_check(const tccrt_pack_t *pack) {
  const tccrt_member_t *member = pack->shared_object;
  if (!member) return TCCRT_OK;
  const uint8_t *d = pack->data + member->offset;
  size_t size = member->size;
  if (size < EHDR_SIZE || memcmp(d, "\x7f" "ELF", 4)) return ELF_BAD("is not an ELF file");
  if (d[4] != 2 || d[5] != 1) return ELF_BAD("is not a 64-bit little-endian ELF file");
  unsigned type = u16(d + 16), machine = u16(d + 18);
  if (type != ET_DYN)
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s is not a shared object (ELF type %u); compile the pack again",
                      pack->path, member->name, type);
  uint64_t shoff = u64(d + 40);
  unsigned shentsize = u16(d + 58), shnum = u16(d + 60);
  if (shentsize != SHDR_SIZE || shnum == 0 || shoff > size || (uint64_t)shnum * SHDR_SIZE > size - shoff)
    return ELF_BAD("has a malformed section header table");
  const uint8_t *dynsym = NULL;
  for (unsigned i = 0; i < shnum; i++) {
    const uint8_t *sh = d + shoff + (size_t)i * SHDR_SIZE;
    if (u32(sh + 4) != SHT_DYNSYM) continue;
    if (dynsym) return ELF_BAD("has two dynamic symbol tables");
    dynsym = sh;
  }
  if (!dynsym) return ELF_BAD("has no dynamic symbol table");
  uint64_t sym_off = u64(dynsym + 24), sym_size = u64(dynsym + 32), entsize = u64(dynsym + 56);
  uint32_t link = u32(dynsym + 40);
  if (entsize != SYM_SIZE || sym_off > size || sym_size > size - sym_off || sym_size % SYM_SIZE)
    return ELF_BAD("has a malformed dynamic symbol table");
  if (link >= shnum) return ELF_BAD("has a dynamic symbol table without a string table");
  const uint8_t *strtab = d + shoff + (size_t)link * SHDR_SIZE;
  uint64_t str_off = u64(strtab + 24), str_size = u64(strtab + 32);
  if (str_off > size || str_size > size - str_off) return ELF_BAD("has a malformed dynamic string table");
  dynsym_t t = {d + sym_off, d + str_off, (size_t)(sym_size / SYM_SIZE), (size_t)str_size};
  for (size_t k = 0; k < t.count; k++) { /* every defined function's name must lie in the table */
    const uint8_t *s = t.syms + k * SYM_SIZE;
    unsigned info = s[4], bind = info >> 4;
    if (u16(s + 6) == 0 || (info & 0xf) != STT_FUNC || (bind != 1 && bind != 2)) continue;
    uint32_t at = u32(s);
    if (at >= t.strings_size || !memchr(t.strings + at, 0, t.strings_size - at))
      return ELF_BAD("has a symbol name outside its string table");
  }
  char arch[32];
  if (tccrt_triple_architecture(pack->target, arch, sizeof arch)) {
    unsigned want = 0;
    for (size_t i = 0; i < sizeof MACHINES / sizeof *MACHINES; i++)
      if (!strcmp(MACHINES[i].arch, arch)) want = MACHINES[i].machine;
    if (want != machine)
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: %s is code for ELF machine %u, but the target names %s; "
                        "compile the pack again", pack->path, member->name, machine, arch);
  }
  if (!defines(&t, "tcc_last_error") || !defines(&t, "tcc_set_num_threads"))
    return tccrt_fail(TCCRT_INVALID_PACK, "%s: the shared object has no tcc_last_error/tcc_set_num_threads; "
                      "it was not built by tcc's CPU backend", pack->path);
  for (size_t k = 0; k < pack->kernel_count; k++) /* a GPU's kernels are in its own library */
    if (pack->kernel_device[k] < 0 && !defines(&t, pack->kernels[k]))
      return tccrt_fail(TCCRT_INVALID_PACK, "%s: the shared object lacks kernel '%s' of the kernel table; "
                        "compile the pack again", pack->path, pack->kernels[k]);
  return TCCRT_OK;
}
