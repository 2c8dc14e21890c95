// What a console page is: its place in the navigation, and the API routes its browser module calls. Every
// route's input is checked by its zod schema once, here at the boundary; the handler gets it parsed.
import { z } from "zod";
import type { ConsoleContext } from "./console-context.ts";

export interface ConsoleRoute<Schema extends z.ZodType = z.ZodType> {
  method: "GET" | "POST";
  /** Under /api/<page id>: "" for /api/<id>, "redrive" for /api/<id>/redrive. */
  path: string;
  /** GET: the query's fields (each a string); POST: the JSON body. */
  input: Schema;
  handle(context: ConsoleContext, input: z.output<Schema>): Promise<unknown>;
}

export interface ConsolePage {
  /** Names the browser module (web/pages/<id>.js), the API prefix (/api/<id>) and the location (#<id>). */
  id: string;
  title: string;
  routes: readonly ConsoleRoute[];
}

/** A route, with its input's type carried from its schema to its handler. */
export function route<Schema extends z.ZodType>(definition: ConsoleRoute<Schema>): ConsoleRoute {
  return definition as unknown as ConsoleRoute;
}

/** Query fields are text: an integer field checked as the CLI's integerIn checks an option. */
export const integerText = (min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]{1,16}$/, "expected a decimal integer")
    .transform(Number)
    .refine((n) => n >= min && n <= max, `expected an integer from ${min} to ${max}`);
