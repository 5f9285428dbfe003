import { z } from "zod";

/** A JSON text column parsed with `schema` (null stays null). */
export const jsonColumn = <T extends z.ZodType>(schema: T) =>
  z
    .string()
    .nullable()
    .transform((text, ctx): z.output<T> | null => {
      if (text === null) return null;
      try {
        return schema.parse(JSON.parse(text));
      } catch {
        ctx.addIssue({ code: "custom", message: "stored JSON does not parse" });
        return z.NEVER;
      }
    });

/** When the rented provider bills from (Provider.billingStartsAt), stored at rent time. */
export const BillingStartsAtSchema = z.enum(["accepted", "running"]);
