// prepack: the quota-sync chunk joined from the repository's lua/quota-sync/ (by dist/protocol/lua-chunks.js, just
// built) into the package's lua/quota-sync.lua, where its direct transport reads it.
import { mkdirSync, writeFileSync } from "node:fs";
import { joinLua } from "../dist/protocol/lua-chunks.js";

const { text } = joinLua(new URL("../../lua/quota-sync/quota-sync.lua", import.meta.url));
mkdirSync(new URL("../lua/", import.meta.url), { recursive: true });
writeFileSync(new URL("../lua/quota-sync.lua", import.meta.url), text);
