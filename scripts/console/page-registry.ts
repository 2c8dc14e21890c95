// The console's pages: one module per page under pages/, each with its browser module under
// web/pages/<id>.js and its API routes under /api/<id>. A page is added by writing those two modules and
// listing it here; the server and the navigation read nothing else.
import type { ConsolePage } from "./console-page.ts";
import { dlqPage } from "./pages/dlq-page.ts";
import { policyPage } from "./pages/policy-page.ts";
import { reportsPage } from "./pages/reports-page.ts";
import { usagePage } from "./pages/usage-page.ts";
import { whatIfPage } from "./pages/what-if-page.ts";
import { whyPage } from "./pages/why-page.ts";

/** In the navigation's order; the first is the start page. */
export const CONSOLE_PAGES: readonly ConsolePage[] = [policyPage, usagePage, reportsPage, whyPage, whatIfPage, dlqPage];
