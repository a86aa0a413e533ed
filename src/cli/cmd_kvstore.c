/*
 * inferx kv-store: the disk tier's block store, offline (no server may have
 * it open): --stats counts blocks, bytes, models and tenants from the file
 * names; --verify reads and checks every block (header, size, checksum;
 * --repair also deletes what fails); --clear deletes every block.
 */
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "inferx/kvstore.h"

int ix_cli_kvstore(int argc, char **argv) {
    bool stats = false, verify = false, repair = false, clear = false, json = false;
    const ix_cli_opt opts[] = {
        {"--stats", NULL, "", "count blocks and bytes (from the names; fast)", IX_CLI_OPT_FLAG, &stats, 0, 0, false,
         NULL},
        {"--verify", NULL, "", "read and check every block", IX_CLI_OPT_FLAG, &verify, 0, 0, false, NULL},
        {"--repair", NULL, "", "with --verify: delete the blocks that fail", IX_CLI_OPT_FLAG, &repair, 0, 0, false,
         NULL},
        {"--clear", NULL, "", "delete every block", IX_CLI_OPT_FLAG, &clear, 0, 0, false, NULL},
        {"--json", NULL, "", "print one JSON object", IX_CLI_OPT_FLAG, &json, 0, 0, false, NULL},
    };
    const char *dir = NULL;
    int n_pos = 0;
    int prc = ix_cli_parse_opts_pos("kv-store", opts, IX_ARRAY_LEN(opts), argc, argv, &dir, 1, &n_pos);
    if (prc == IX_CLI_HELP) {
        printf("usage: inferx kv-store --stats|--verify [--repair]|--clear DIR [--json]\n"
               "The disk tier's KV block store in DIR, offline (docs/kv-cache.md).\n\n");
        ix_cli_print_opts(stdout, opts, IX_ARRAY_LEN(opts));
        return 0;
    }
    if (prc != IX_CLI_OK) return 2;
    if (!n_pos || stats + verify + clear != 1 || (repair && !verify)) {
        fprintf(stderr, "inferx kv-store: give DIR and one of --stats, --verify [--repair], --clear\n");
        return 2;
    }
    ix_errbuf err = {{0}};
    if (clear) {
        uint64_t n = 0;
        if (ix_kvstore_clear(dir, &n, &err) != IX_OK) {
            fprintf(stderr, "inferx kv-store: %s\n", err.msg);
            return 1;
        }
        if (json) printf("{\"deleted\": %llu}\n", (unsigned long long)n);
        else printf("%s: %llu blocks deleted\n", dir, (unsigned long long)n);
        return 0;
    }
    ix_kvstore_verify_report r;
    ix_kvstore_check mode = stats ? IX_KVSTORE_COUNT : repair ? IX_KVSTORE_REPAIR : IX_KVSTORE_VERIFY;
    if (ix_kvstore_verify(dir, mode, &r, &err) != IX_OK) {
        fprintf(stderr, "inferx kv-store: %s\n", err.msg);
        return 1;
    }
    if (json) {
        printf("{\"blocks\": %llu, \"ok\": %llu, \"bad\": %llu, \"bytes\": %llu, \"models\": %llu, \"tenants\": %llu, "
               "\"temporary\": %llu, \"checked\": %s}\n",
               (unsigned long long)r.n_files, (unsigned long long)r.n_ok, (unsigned long long)r.n_bad,
               (unsigned long long)r.bytes, (unsigned long long)r.n_models, (unsigned long long)r.n_tenants,
               (unsigned long long)r.n_tmp, stats ? "false" : "true");
    } else {
        printf("%s: %llu blocks, %.1f MiB, %llu models, %llu tenants, %llu temporary files\n", dir,
               (unsigned long long)r.n_files, (double)r.bytes / (1 << 20), (unsigned long long)r.n_models,
               (unsigned long long)r.n_tenants, (unsigned long long)r.n_tmp);
        if (!stats)
            printf("checked: %llu good, %llu bad%s\n", (unsigned long long)r.n_ok, (unsigned long long)r.n_bad,
                   repair && r.n_bad ? " (deleted)" : "");
    }
    return verify && r.n_bad && !repair ? 1 : 0;
}
